package executor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ceilingsHere are test Ceilings, which must use cgroups where this test
// runs as root on a machine with cgroup v1's pids and memory mounted (as
// CI's); elsewhere the test is skipped.
func ceilingsHere(t *testing.T, l Limits) *Ceilings {
	t.Helper()
	c, err := NewCeilings(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	mounts, _ := cgroupMounts()
	_, pids := mounts["pids"]
	_, mem := mounts["memory"]
	switch {
	case os.Geteuid() != 0 || !pids || !mem:
		t.Skip("cgroup v1 pids and memory are not both mounted and writable here (not root)")
	case c.pids == "" || c.memory == "":
		t.Fatalf("running as root with cgroup v1 mounted, the ceilings use no cgroups: %s", c.Describe())
	}
	return c
}

// A fork bomb, a memory hog and a file past the bound each fail with the
// limit named, in and out of the sandbox, while a neighbour step on the
// same runner finishes; nothing of them is left afterwards.
func TestCeilingsStopBombs(t *testing.T) {
	t.Parallel()
	c := ceilingsHere(t, Limits{Processes: 64, Memory: 64 << 20, FileSize: 1 << 20})
	if c.prlimit == "" {
		t.Fatal("prlimit is not installed (util-linux)")
	}
	sb, err := NewSandbox(nil, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sandbox := range []*Sandbox{nil, sb} {
		r := &Runner{Command: &CommandRunner{Allow: []string{"/bin/*", "/usr/bin/*"}, Ceilings: c, Sandbox: sandbox}}
		tests := []struct {
			name    string
			argv    []string
			wantErr string
		}{
			{"fork bomb", []string{"/bin/sh", "-c", `i=0; while [ $i -lt 500 ]; do sleep 30 & i=$((i+1)); done; wait`},
				"it reached its process limit (64 processes and threads): "},
			{"memory hog", []string{"/usr/bin/python3", "-c", `b = b"a" * (256 << 20); print(len(b))`},
				"it passed its memory limit (64 MiB): the kernel killed 1 of its processes"},
			{"file too large", []string{"/bin/sh", "-c", `head -c 2000000 /dev/zero > /tmp/big`},
				"it wrote a file past its file size limit (1 MiB) (exit code 153)"},
			{"neighbour", []string{"/bin/sh", "-c", `sleep 1; echo fine`}, ""},
		}
		var wg sync.WaitGroup
		for _, tt := range tests {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res := r.Run(ctx, cmdCall(tt.argv...))
				where := fmt.Sprintf("%s (sandbox %v)", tt.name, sandbox != nil)
				switch {
				case tt.wantErr == "" && (!res.OK || res.Output != "fine\n"):
					t.Errorf("%s: %+v", where, res)
				case tt.wantErr != "" && (res.OK || res.ExitReason != ReasonLimit || !strings.Contains(res.Error, tt.wantErr)):
					t.Errorf("%s: %+v; want exit reason limit, %q", where, res, tt.wantErr)
				}
			})
		}
		wg.Wait()
	}
	for _, dir := range []string{c.pids, c.memory} {
		if left, _ := filepath.Glob(filepath.Join(dir, "s*")); len(left) > 0 {
			t.Errorf("step cgroups left: %v", left)
		}
	}
}

// The cgroups of a worker that died (SIGKILL: nothing removed them) go,
// their processes killed, when the next process makes its Ceilings.
func TestCeilingsSweepADeadWorkersCgroups(t *testing.T) {
	t.Parallel()
	c := ceilingsHere(t, Limits{Processes: 64, Memory: 64 << 20})
	// A pid no process can have (past the kernel's pid_max), so that the
	// folder is a dead worker's whatever runs meanwhile.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	var orphans []*exec.Cmd
	for _, base := range []string{filepath.Dir(c.pids), filepath.Dir(c.memory)} {
		dir := filepath.Join(base, fmt.Sprintf("orrery-%d", pidMax+1))
		step := filepath.Join(dir, "s1")
		if err := os.MkdirAll(step, 0o755); err != nil {
			t.Fatal(err)
		}
		orphan := exec.Command("/bin/sleep", "60") // a step's process the dead worker left
		if err := orphan.Start(); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, orphan)
		if err := os.WriteFile(filepath.Join(step, "cgroup.procs"), []byte(fmt.Sprint(orphan.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, dir)
	}
	next, err := NewCeilings(Limits{Processes: 64, Memory: 64 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	for _, dir := range stale {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: %v; want it removed", dir, err)
		}
	}
	for _, o := range orphans {
		if err := o.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("the orphan: %v; want it killed", err)
		}
	}
}

func TestLimitsDescribed(t *testing.T) {
	c := &Ceilings{Limits: Limits{Processes: 10, Memory: 1 << 30, FileSize: 3 << 20}, prlimit: "/usr/bin/prlimit"}
	if got, want := c.Describe(), "processes 10 NOT ENFORCED (no cgroup; root ignores RLIMIT_NPROC: give --command-user), memory 1 GiB by rlimit (each process's address space), file size 3 MiB by rlimit, a step's resources NOT ENFORCED (no cgroup: a reservation only)"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	c.pids, c.memory, c.cpu = "/x", "/y", "/z"
	if got, want := c.Describe(), "processes 10 by cgroup (pids), memory 1 GiB by cgroup (memory), file size 3 MiB by rlimit, a step's resources: memory by cgroup, cpu by cgroup quota"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
}

// Steps run as another user (CommandUser) enter their cgroups too: the
// cgroup's process list is theirs to write, nothing else of it.
func TestCeilingsForACommandUser(t *testing.T) {
	t.Parallel()
	ceilingsHere(t, Limits{Processes: 1, Memory: 1}) // skips where cgroups are not ours
	nobody, err := LookupUser("nobody")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCeilings(Limits{Processes: 16, Memory: 64 << 20, FileSize: 1 << 20}, nobody)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sb, err := NewSandbox(nil, nil, false, nobody)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}, User: nobody, Ceilings: c, Sandbox: sb}}
	res := r.Run(context.Background(), cmdCall("/bin/sh", "-c", `id -u; i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; wait`))
	if res.OK || res.ExitReason != ReasonLimit || !strings.Contains(res.Error, "process limit (16 processes and threads)") ||
		!strings.HasPrefix(res.Output, fmt.Sprint(nobody.Uid)) {
		t.Errorf("Run() = %+v, want the process limit reached as uid %d", res, nobody.Uid)
	}
}

// A step is held to the memory and CPU it asks for (Call.Memory, .CPU),
// below the worker's ceiling: past its memory it is killed with exit
// reason resources, retryable, while a neighbour finishes; its CPU is a
// quota of that many cores; nothing of them is left afterwards.
func TestStepsHeldToTheirResources(t *testing.T) {
	t.Parallel()
	c := ceilingsHere(t, Limits{Processes: 64, Memory: 1 << 30})
	if c.cpu == "" {
		t.Skip("cgroup v1 cpu is not mounted and writable here")
	}
	r := &Runner{Command: &CommandRunner{Allow: []string{"/bin/*", "/usr/bin/*"}, Ceilings: c}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hog := cmdCall("/usr/bin/python3", "-c", `b = b"a" * (256 << 20); print(len(b))`)
	hog.Memory = 64 << 20
	var wg sync.WaitGroup
	var hogRes, neighbour Result
	wg.Go(func() { hogRes = r.Run(ctx, hog) })
	wg.Go(func() {
		n := cmdCall("/usr/bin/python3", "-c", `b = b"a" * (128 << 20); print("fine")`)
		n.Memory = 512 << 20
		neighbour = r.Run(ctx, n)
	})
	wg.Wait()
	if hogRes.OK || hogRes.ExitReason != ReasonResources || !hogRes.Retryable ||
		!strings.Contains(hogRes.Error, "it passed the memory it asked for (resources.memory 64 MiB): the kernel killed 1 of its processes") {
		t.Errorf("the hog: %+v; want exit reason resources, retryable", hogRes)
	}
	if !neighbour.OK || neighbour.Output != "fine\n" {
		t.Errorf("the neighbour within its 512 MiB: %+v", neighbour)
	}
	// Half a core: the step's cgroup has a quota of half the period.
	mounts, _ := cgroupMounts()
	quota := cmdCall("/bin/sh", "-c", `p=$(grep -E '^[0-9]+:([^:]*,)?cpu(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3); cat "`+mounts["cpu"]+`$p/cpu.cfs_quota_us" "`+mounts["cpu"]+`$p/cpu.cfs_period_us"`)
	quota.CPU = 500
	if res := r.Run(ctx, quota); !res.OK || fmt.Sprint(strings.Fields(res.Output)) != "[50000 100000]" {
		t.Errorf("a step of 500m: quota and period %q (%+v), want 50000 and 100000", res.Output, res)
	}
	for _, dir := range []string{c.pids, c.memory, c.cpu} {
		if left, _ := filepath.Glob(filepath.Join(dir, "s*")); len(left) > 0 {
			t.Errorf("step cgroups left: %v", left)
		}
	}
}
