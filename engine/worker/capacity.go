package worker

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/metrics"
)

// MachineCapacity is what a worker has when it is not told: this
// machine's cores (those this process may run on) and its memory less a
// reserve for the worker and the system (a tenth, at least 512 MiB), the
// lower of the machine's and this process's cgroup's; no GPUs and no
// custom counts, which only an operator can declare (--capacity).
func MachineCapacity() resources.Vector {
	v := resources.Vector{CPU: int64(runtime.NumCPU()) * 1000}
	mem := memTotal()
	if limit := cgroupMemoryLimit(); limit > 0 && (mem == 0 || limit < mem) {
		mem = limit
	}
	reserve := max(mem/10, 512<<20)
	if mem > reserve {
		v.Memory = min(mem-reserve, resources.MaxMemory) &^ (1<<20 - 1) // whole MiB: it reads as 21694Mi, not bytes
	}
	return v
}

// memTotal is /proc/meminfo's MemTotal in bytes, 0 when it cannot be read.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupMemoryLimit is this process's cgroup memory limit (v2's
// memory.max, else v1's memory.limit_in_bytes) in bytes; 0 for none.
func cgroupMemoryLimit() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "unlimited" (a page-rounded huge number)
			return 0
		}
		return n
	}
	return 0
}

// ResourceGauges are this worker's capacity and what the attempts it runs
// ask for together, by resource (orrery_worker_capacity and
// orrery_worker_allocated; cpu in cores, memory in bytes, others counts):
// each worker process exports its own.
func (w *Worker) ResourceGauges() []prometheus.Collector {
	byName := func(v resources.Vector) map[string]float64 {
		out := map[string]float64{resources.CPU: float64(v.CPU) / 1000, resources.Memory: float64(v.Memory), resources.GPU: float64(v.GPU)}
		for name, n := range v.Custom {
			out[name] = float64(n)
		}
		return out
	}
	capacity := w.cfg.Capacity
	return []prometheus.Collector{
		metrics.NewGaugeFunc("orrery_worker_capacity", "What this worker process has for the attempts it runs at once, by resource (cpu in cores, memory in bytes).", "resource",
			func(context.Context) (map[string]float64, error) { return byName(capacity), nil }),
		metrics.NewGaugeFunc("orrery_worker_allocated", "What the attempts this worker process runs ask for together, by resource (every resource of its capacity, 0 when none).", "resource",
			func(context.Context) (map[string]float64, error) {
				used := byName(w.gate.inUse())
				for name := range byName(capacity) {
					if _, ok := used[name]; !ok {
						used[name] = 0
					}
				}
				return used, nil
			}),
	}
}
