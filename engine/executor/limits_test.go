package executor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// Under cgroup v2 (laid out here in a folder, as the kernel shows it:
// this machine's v2 hierarchy has none of the controllers, which v1
// holds) a worker enables the controllers below its cgroup, moving itself
// into a leaf first when its cgroup is not the root, and each step's one
// cgroup holds its pids, cpu and memory bounds; a worker sharing its
// cgroup with other processes says it cannot.
func TestCeilingsUnderCgroupV2(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	layout := func(t *testing.T, own, controllers, procs string) string {
		t.Helper()
		root := t.TempDir()
		cg := filepath.Join(root, "cgroup")
		if err := os.MkdirAll(filepath.Join(cg, own), 0o755); err != nil {
			t.Fatal(err)
		}
		for file, text := range map[string]string{
			filepath.Join(root, "mountinfo"):                 "30 25 0:26 / " + cg + " rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			filepath.Join(root, "self"):                      "0::" + own + "\n",
			filepath.Join(cg, own, "cgroup.controllers"):     controllers,
			filepath.Join(cg, own, "cgroup.procs"):           procs,
			filepath.Join(cg, own, "cgroup.subtree_control"): "",
		} {
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		oldMounts, oldSelf := mountinfo, selfCgroup
		mountinfo, selfCgroup = filepath.Join(root, "mountinfo"), filepath.Join(root, "self")
		t.Cleanup(func() { mountinfo, selfCgroup = oldMounts, oldSelf })
		return filepath.Join(cg, own)
	}
	read := func(t *testing.T, path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Run("root cgroup", func(t *testing.T) {
		parent := layout(t, "/", "cpuset cpu io memory pids", self)
		c, err := NewCeilings(Limits{Processes: 64, Memory: 1 << 30}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.unified == "" || c.pids != c.unified || c.memory != c.unified || c.cpu != c.unified || filepath.Dir(c.unified) != parent {
			t.Fatalf("folders pids %q memory %q cpu %q unified %q (%s), want one folder below %s", c.pids, c.memory, c.cpu, c.unified, c.why, parent)
		}
		if got := read(t, filepath.Join(parent, "cgroup.subtree_control")); got != "+pids +memory +cpu" {
			t.Errorf("the worker's cgroup enables %q, want +pids +memory +cpu", got)
		}
		if got := read(t, filepath.Join(c.unified, "cgroup.subtree_control")); got != "+pids +memory +cpu" {
			t.Errorf("the folder of step cgroups enables %q", got)
		}
		if d := c.Describe(); !strings.Contains(d, "memory 1 GiB by cgroup (memory)") || !strings.Contains(d, "memory by cgroup, cpu by cgroup quota") || !strings.Contains(d, "cgroups of v2") {
			t.Errorf("Describe() = %q", d)
		}
		s, argv, err := c.enter([]string{"/bin/true"}, 500, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		step := filepath.Join(c.unified, "s1")
		if len(s.dirs) != 1 || s.dirs[0] != step {
			t.Fatalf("step cgroups %v, want one: %s", s.dirs, step)
		}
		for file, want := range map[string]string{"pids.max": "64", "cpu.max": "50000 100000", "memory.max": "67108864", "memory.swap.max": "0"} {
			if got := read(t, filepath.Join(step, file)); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
		if want := []string{"/bin/sh", "-c", `{ echo $$ > "$1"; } || { echo "orrery: cannot enter the step's cgroups" >&2; exit 126; }; shift 1; exec "$@"`, "orrery-step", filepath.Join(step, "cgroup.procs"), "/bin/true"}; !slices.Equal(argv[:len(want)-1], want[:len(want)-1]) || argv[len(argv)-1] != "/bin/true" {
			t.Errorf("argv %q", argv)
		}
		// The kernel counts an OOM kill in memory.events.
		if err := os.WriteFile(filepath.Join(step, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if why := s.passed(nil); why != "it passed the memory it asked for (resources.memory 64 MiB): the kernel killed 1 of its processes" {
			t.Errorf("passed() = %q", why)
		}
	})
	t.Run("alone in a delegated cgroup", func(t *testing.T) {
		parent := layout(t, "/system.slice/orrery.service", "cpu memory pids", self+"\n")
		c, err := NewCeilings(Limits{Memory: 1 << 30}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(parent, "orrery-"+self+"-self", "cgroup.procs")); got != self {
			t.Errorf("the leaf's processes %q, want the worker (%s)", got, self)
		}
		if c.memory != c.unified || c.cpu != c.unified || c.pids != "" || filepath.Dir(c.unified) != parent {
			t.Errorf("folders pids %q memory %q cpu %q unified %q (%s)", c.pids, c.memory, c.cpu, c.unified, c.why)
		}
		if got := read(t, filepath.Join(parent, "cgroup.subtree_control")); got != "+memory +cpu" {
			t.Errorf("the worker's cgroup enables %q, want +memory +cpu", got)
		}
	})
	t.Run("a shared cgroup", func(t *testing.T) {
		layout(t, "/user.slice/session-4.scope", "cpu memory pids", "1\n"+self+"\n")
		c, err := NewCeilings(Limits{Memory: 1 << 30}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.unified != "" || c.memory != "" || c.cpu != "" {
			t.Errorf("folders memory %q cpu %q unified %q, want none", c.memory, c.cpu, c.unified)
		}
		if d := c.Describe(); !strings.Contains(d, "a step's resources NOT ENFORCED") || !strings.Contains(d, "holds other processes too (pid 1); run it in a cgroup of its own (systemd: Delegate=yes)") {
			t.Errorf("Describe() = %q", d)
		}
	})
	t.Run("controllers not delegated", func(t *testing.T) {
		layout(t, "/", "hugetlb", "")
		c, err := NewCeilings(Limits{Memory: 1 << 30}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.unified != "" || !strings.Contains(c.Describe(), "has none of the memory, cpu controllers (they are not delegated to it)") {
			t.Errorf("unified %q, Describe() = %q", c.unified, c.Describe())
		}
	})
}
