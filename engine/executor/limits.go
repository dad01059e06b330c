package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits are the ceilings of one command step: its processes together,
// whatever they start. Zero leaves one unbounded.
type Limits struct {
	// Processes bounds its processes and threads at once: a fork past it
	// fails (EAGAIN).
	Processes int
	// Memory bounds its memory, in bytes: what its processes use together
	// (a cgroup's), or each one's address space where only rlimits hold;
	// past it the kernel kills one of them.
	Memory int64
	// FileSize bounds a file it writes, in bytes: a write past it fails
	// and its process gets SIGXFSZ.
	FileSize int64
}

// DefaultLimits are a worker's unless it gives its own: enough for a
// build or a data step, not for a fork or memory bomb that reaches the
// machine and every other tenant's steps on it.
var DefaultLimits = Limits{Processes: 512, Memory: 1 << 30, FileSize: 1 << 30}

// ReasonLimit is the exit reason of a step that passed one of its
// Limits; its error says which.
const ReasonLimit = "limit"

// ReasonResources is the exit reason of a step killed for passing the
// memory it asked for (Call.Memory, below the worker's ceiling): its
// attempt is retried per its policy.
const ReasonResources = "resources"

// cfsPeriod is the CPU quota's period (µs): a step of N millicores gets
// N*cfsPeriod/1000 µs of CPU time in each.
const cfsPeriod = 100_000

// Ceilings enforce Limits on a worker's command steps: by cgroup (the
// pids, memory and cpu controllers, of cgroup v1 or of the v2 unified
// hierarchy) where this process may make cgroups below its own, each step
// in one of its own, which its processes enter before the step's program
// runs; by rlimits otherwise (prlimit(1), which sets them and then runs
// the step), and always for the file size. Make one a process with
// NewCeilings; Close removes its cgroups.
//
// A step's processes start through a shell that writes its own pid into
// the step's cgroups, then prlimit, then the sandbox: all one process,
// each exec'ing the next, so nothing of the step runs before it is
// bounded. The cgroups of a process that died (a worker killed) are
// removed by the next NewCeilings on the machine, their processes killed.
//
// Under cgroup v2 a cgroup that holds processes cannot give controllers
// to cgroups below it, so a worker alone in its cgroup (a systemd service
// with Delegate=yes, a container with a cgroup namespace of its own)
// first moves itself into a leaf below it (orrery-PID-self), as systemd
// asks of the services it delegates to; a worker that shares its cgroup
// with other processes cannot, and says so (Describe).
type Ceilings struct {
	Limits Limits
	// pids, memory and cpu are this process's folders of step cgroups,
	// "" where cgroups are not available; unified is the one of them in
	// the cgroup v2 hierarchy (each of the three that equals it is v2).
	pids, memory, cpu, unified string
	// why says why no cgroup v2 was used where the hierarchy exists.
	why     string
	prlimit string // prlimit's path; "" when it is missing
	user    *syscall.Credential
	seq     atomic.Uint64
}

// ceilingsMade numbers a process's Ceilings: each has its own folder.
var ceilingsMade atomic.Uint64

// The files that name the mounts (the cgroup file systems among them)
// and this process's cgroups: variables so a test can lay out a
// hierarchy of its own.
var (
	mountinfo  = "/proc/self/mountinfo"
	selfCgroup = "/proc/self/cgroup"
)

// unifiedKey is the cgroup v2 hierarchy's key in cgroupMounts' maps.
const unifiedKey = "cgroup2"

// NewCeilings prepares l for steps run as user (nil: this process's):
// cgroups where this process may make them, rlimits for the rest.
func NewCeilings(l Limits, user *syscall.Credential) (*Ceilings, error) {
	if l.Processes < 0 || l.Memory < 0 || l.FileSize < 0 {
		return nil, errors.New("a step limit is negative")
	}
	c := &Ceilings{Limits: l, user: user}
	if p, err := exec.LookPath("prlimit"); err == nil {
		c.prlimit = p
	}
	mounts, own := cgroupMounts()
	n := ceilingsMade.Add(1) // a process may have several (workers of `orrery dev`)
	name := fmt.Sprintf("orrery-%d-%d", os.Getpid(), n)
	controllers := []struct {
		name   string
		dir    *string
		wanted bool
	}{{"pids", &c.pids, l.Processes > 0}, {"memory", &c.memory, true}, {"cpu", &c.cpu, true}} // a step's resources may ask for memory and cpu
	var rest []string // wanted, not in cgroup v1
	for _, ctl := range controllers {
		base, ok := mounts[ctl.name]
		if !ctl.wanted {
			continue
		}
		if !ok {
			rest = append(rest, ctl.name)
			continue
		}
		parent := filepath.Join(base, own[ctl.name])
		sweepStale(parent)
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			continue // not ours to make (not root, read-only): rlimits stand in
		}
		*ctl.dir = dir
	}
	if mount, ok := mounts[unifiedKey]; ok && len(rest) > 0 {
		var got []string
		c.unified, got, c.why = unifiedFolder(mount, own[unifiedKey], name, rest)
		for _, ctl := range controllers {
			if slices.Contains(got, ctl.name) {
				*ctl.dir = c.unified
			}
		}
	}
	return c, nil
}

// unifiedFolder makes this process's folder of step cgroups in the
// cgroup v2 hierarchy mounted at mount, where this process's cgroup is
// own, with those of the wanted controllers it can give its steps. It
// returns the folder and those controllers, or "" and why it cannot.
func unifiedFolder(mount, own, name string, wanted []string) (dir string, got []string, why string) {
	parent := filepath.Join(mount, own)
	// Moved already (an earlier Ceilings of this process): its leaf's
	// parent is the cgroup to use.
	if filepath.Base(parent) == fmt.Sprintf("orrery-%d-self", os.Getpid()) {
		parent = filepath.Dir(parent)
	}
	b, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return "", nil, fmt.Sprintf("cgroup v2: %v", err)
	}
	available := strings.Fields(string(b))
	for _, w := range wanted {
		if slices.Contains(available, w) {
			got = append(got, w)
		}
	}
	if len(got) == 0 {
		return "", nil, fmt.Sprintf("cgroup v2: %s has none of the %s controllers (they are not delegated to it)", parent, strings.Join(wanted, ", "))
	}
	sweepStale(parent)
	if filepath.Clean(own) != "/" { // the root cgroup may hold processes and give controllers
		b, err := os.ReadFile(filepath.Join(parent, "cgroup.procs"))
		if err != nil {
			return "", nil, fmt.Sprintf("cgroup v2: %v", err)
		}
		self := strconv.Itoa(os.Getpid())
		for _, p := range strings.Fields(string(b)) {
			if p != self {
				return "", nil, fmt.Sprintf("cgroup v2: the worker's cgroup %s holds other processes too (pid %s); run it in a cgroup of its own (systemd: Delegate=yes)", parent, p)
			}
		}
		if len(b) > 0 {
			leaf := filepath.Join(parent, fmt.Sprintf("orrery-%s-self", self))
			if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return "", nil, fmt.Sprintf("cgroup v2: %v", err)
			}
			if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(self), 0); err != nil {
				return "", nil, fmt.Sprintf("cgroup v2: moving the worker into %s: %v", leaf, err)
			}
		}
	}
	enable := "+" + strings.Join(got, " +")
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		return "", nil, fmt.Sprintf("cgroup v2: enabling %s in %s: %v", enable, parent, err)
	}
	dir = filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, fmt.Sprintf("cgroup v2: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		removeCgroup(dir)
		return "", nil, fmt.Sprintf("cgroup v2: enabling %s in %s: %v", enable, dir, err)
	}
	return dir, got, ""
}

// cgroupMounts are the mount points of the cgroup v1 hierarchies by
// controller and of the v2 hierarchy (unifiedKey), and this process's
// cgroup in each.
func cgroupMounts() (mounts, own map[string]string) {
	mounts, own = map[string]string{}, map[string]string{}
	if f, err := os.Open(mountinfo); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS
			fields := strings.Fields(sc.Text())
			sep := -1
			for i, f := range fields {
				if f == "-" {
					sep = i
					break
				}
			}
			if sep < 0 || sep+3 >= len(fields) || len(fields) < 5 {
				continue
			}
			switch fields[sep+1] {
			case "cgroup2":
				mounts[unifiedKey] = fields[4]
			case "cgroup":
				for _, opt := range strings.Split(fields[sep+3], ",") {
					if opt == "pids" || opt == "memory" || opt == "cpu" {
						mounts[opt] = fields[4]
					}
				}
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile(selfCgroup); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			// ID:CONTROLLERS:PATH; v2's is 0::PATH
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if parts[0] == "0" && parts[1] == "" {
				own[unifiedKey] = parts[2]
				continue
			}
			for _, ctl := range strings.Split(parts[1], ",") {
				own[ctl] = parts[2]
			}
		}
	}
	return mounts, own
}

// sweepStale removes the step cgroups that processes gone left in
// parent (orrery-PID-N folders whose PID is not alive), killing what
// still runs in them.
func sweepStale(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ours := strings.CutPrefix(e.Name(), "orrery-")
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !e.IsDir() || !ours || err != nil || alive(pid) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		steps, _ := os.ReadDir(dir)
		for _, s := range steps {
			if s.IsDir() {
				removeCgroup(filepath.Join(dir, s.Name()))
			}
		}
		removeCgroup(dir)
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// removeCgroup kills the processes in a cgroup and removes it, waiting a
// moment for them to go.
func removeCgroup(dir string) {
	for range 50 {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Enforces says which resources a step asks for its command runs are held
// to: "memory, cpu" (by cgroup), "memory", or "none" (a reservation only),
// as the cluster page shows it.
func (c *Ceilings) Enforces() string {
	switch {
	case c.memory != "" && c.cpu != "":
		return "memory, cpu"
	case c.memory != "":
		return "memory"
	}
	return "none"
}

// Describe says how each limit is enforced, for a worker's start log.
func (c *Ceilings) Describe() string {
	var parts []string
	by := func(what string, set bool, value string, how string) {
		if set {
			parts = append(parts, what+" "+value+" "+how)
		}
	}
	rl := "by rlimit"
	if c.prlimit == "" {
		rl = "NOT ENFORCED (prlimit is not installed)"
	}
	procs := "NOT ENFORCED (no cgroup; root ignores RLIMIT_NPROC: give --command-user)"
	switch {
	case c.pids != "":
		procs = "by cgroup (pids)"
	case c.user != nil && c.user.Uid != 0 && c.prlimit != "":
		procs = "by rlimit (RLIMIT_NPROC: all the command user's processes together)"
	}
	mem := "by rlimit (each process's address space)"
	switch {
	case c.memory != "":
		mem = "by cgroup (memory)"
	case c.prlimit == "":
		mem = rl
	}
	by("processes", c.Limits.Processes > 0, strconv.Itoa(c.Limits.Processes), procs)
	by("memory", c.Limits.Memory > 0, Bytes(c.Limits.Memory), mem)
	by("file size", c.Limits.FileSize > 0, Bytes(c.Limits.FileSize), rl)
	// What a step asks for (docs/resources.md).
	switch {
	case c.memory != "" && c.cpu != "":
		parts = append(parts, "a step's resources: memory by cgroup, cpu by cgroup quota")
	case c.memory != "":
		parts = append(parts, "a step's resources: memory by cgroup, cpu NOT ENFORCED (no cpu cgroup: a reservation only)")
	default:
		parts = append(parts, "a step's resources NOT ENFORCED (no cgroup: a reservation only)")
	}
	if c.unified != "" {
		parts = append(parts, "cgroups of v2")
	}
	if c.why != "" && (c.memory == "" || c.cpu == "") {
		parts = append(parts, "no "+c.why) // "no cgroup v2: ..."
	}
	return strings.Join(parts, ", ")
}

// Bytes writes n as people read sizes: 1 GiB, 512 MiB, 1000 B.
func Bytes(n int64) string {
	for _, u := range []struct {
		unit  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.unit)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// Close removes this process's step cgroups (once its steps ended).
func (c *Ceilings) Close() error {
	for i, dir := range []string{c.pids, c.memory, c.cpu} {
		if dir == "" || slices.Contains([]string{c.pids, c.memory, c.cpu}[:i], dir) {
			continue // none, or cgroup v2's one folder again
		}
		steps, _ := os.ReadDir(dir)
		for _, s := range steps {
			if s.IsDir() {
				removeCgroup(filepath.Join(dir, s.Name()))
			}
		}
		removeCgroup(dir)
	}
	return nil
}

// stepCgroups are one step's cgroups.
type stepCgroups struct {
	c *Ceilings
	// pids, memory and cpu are its cgroup of each controller (one and the
	// same under cgroup v2), dirs each of them once.
	pids, memory, cpu string
	dirs              []string
	// memoryLimit is the step's memory bound; asked says it is what the
	// step asked for (below the worker's ceiling).
	memoryLimit int64
	asked       bool
}

// enter makes a step's cgroups and returns them with the argv that runs
// argv inside them and its rlimits. cpu (millicores) and memory (bytes)
// are what the step asks for (0: nothing): its memory bound is the lower
// of that and the worker's ceiling, its CPU a quota of that many cores.
func (c *Ceilings) enter(argv []string, cpu, memory int64) (*stepCgroups, []string, error) {
	s := &stepCgroups{c: c, memoryLimit: c.Limits.Memory}
	if memory > 0 && (s.memoryLimit == 0 || memory < s.memoryLimit) {
		s.memoryLimit, s.asked = memory, true
	}
	name := fmt.Sprintf("s%d", c.seq.Add(1))
	// What to write, in order: under cgroup v2 one cgroup holds every
	// controller's files, under v1 each controller has its own.
	type write struct {
		file, value string
		optional    bool // absent where the kernel lacks it
	}
	writes := map[string][]write{}
	in := func(folder string, w ...write) string {
		dir := filepath.Join(folder, name)
		if _, ok := writes[dir]; !ok {
			s.dirs = append(s.dirs, dir)
		}
		writes[dir] = append(writes[dir], w...)
		return dir
	}
	if c.pids != "" {
		s.pids = in(c.pids, write{file: "pids.max", value: strconv.Itoa(c.Limits.Processes)})
	}
	if c.cpu != "" && cpu > 0 {
		quota := max(cpu*cfsPeriod/1000, 1000) // the kernel's least: 1 ms
		if c.cpu == c.unified {
			s.cpu = in(c.cpu, write{file: "cpu.max", value: fmt.Sprintf("%d %d", quota, cfsPeriod)})
		} else {
			s.cpu = in(c.cpu, write{file: "cpu.cfs_period_us", value: strconv.Itoa(cfsPeriod)},
				write{file: "cpu.cfs_quota_us", value: strconv.FormatInt(quota, 10)})
		}
	}
	if c.memory != "" && s.memoryLimit > 0 {
		limit := strconv.FormatInt(s.memoryLimit, 10)
		// With swap accounting, swap counts too (else the step swaps).
		if c.memory == c.unified {
			s.memory = in(c.memory, write{file: "memory.max", value: limit}, write{file: "memory.swap.max", value: "0", optional: true})
		} else {
			s.memory = in(c.memory, write{file: "memory.limit_in_bytes", value: limit}, write{file: "memory.memsw.limit_in_bytes", value: limit, optional: true})
		}
	}
	var procs []string
	for _, dir := range s.dirs {
		if err := os.Mkdir(dir, 0o755); err != nil {
			s.release()
			return nil, nil, fmt.Errorf("step cgroup: %w", err)
		}
		for _, w := range writes[dir] {
			if err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.value), 0); err != nil && !w.optional {
				s.release()
				return nil, nil, fmt.Errorf("step cgroup %s: %w", w.file, err)
			}
		}
		if u := c.user; u != nil { // the step's user joins it
			if err := os.Chown(filepath.Join(dir, "cgroup.procs"), int(u.Uid), int(u.Gid)); err != nil {
				s.release()
				return nil, nil, fmt.Errorf("step cgroup: %w", err)
			}
		}
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	if c.prlimit != "" {
		rl := []string{c.prlimit}
		if c.Limits.FileSize > 0 {
			rl = append(rl, fmt.Sprintf("--fsize=%d", c.Limits.FileSize))
		}
		if s.memoryLimit > 0 && c.memory == "" {
			rl = append(rl, fmt.Sprintf("--as=%d", s.memoryLimit))
		}
		if c.Limits.Processes > 0 && c.pids == "" && c.user != nil && c.user.Uid != 0 {
			rl = append(rl, fmt.Sprintf("--nproc=%d", c.Limits.Processes))
		}
		if len(rl) > 1 {
			argv = append(append(rl, "--"), argv...)
		}
	}
	if len(procs) > 0 {
		// The shell moves itself into the step's cgroups ($1.., their
		// cgroup.procs), then becomes the step (the rest).
		var join []string
		for i := range procs {
			join = append(join, fmt.Sprintf(`echo $$ > "$%d"`, i+1))
		}
		script := fmt.Sprintf(`{ %s; } || { echo "orrery: cannot enter the step's cgroups" >&2; exit 126; }; shift %d; exec "$@"`,
			strings.Join(join, " && "), len(procs))
		argv = append(append([]string{"/bin/sh", "-c", script, "orrery-step"}, procs...), argv...)
	}
	return s, argv, nil
}

// passed says which limit the step passed, judging by its cgroups'
// counters and its exit (a process killed by SIGXFSZ, or a shell or the
// sandbox reporting one: 128+25), or "".
func (s *stepCgroups) passed(state *os.ProcessState) string {
	var why []string
	if n := counter(s.pids, "pids.events", "max"); n > 0 {
		why = append(why, fmt.Sprintf("it reached its process limit (%d processes and threads): %d forks were refused", s.c.Limits.Processes, n))
	}
	oom := "memory.oom_control"
	if s.c.memory == s.c.unified {
		oom = "memory.events"
	}
	if n := counter(s.memory, oom, "oom_kill"); n > 0 {
		if s.asked {
			why = append(why, fmt.Sprintf("it passed the memory it asked for (resources.memory %s): the kernel killed %d of its processes", Bytes(s.memoryLimit), n))
		} else {
			why = append(why, fmt.Sprintf("it passed its memory limit (%s): the kernel killed %d of its processes", Bytes(s.memoryLimit), n))
		}
	}
	if state != nil && s.c.Limits.FileSize > 0 {
		ws, _ := state.Sys().(syscall.WaitStatus)
		if ws.Signaled() && ws.Signal() == syscall.SIGXFSZ || ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGXFSZ) {
			why = append(why, fmt.Sprintf("it wrote a file past its file size limit (%s)", Bytes(s.c.Limits.FileSize)))
		}
	}
	return strings.Join(why, "; ")
}

// counter reads "NAME N" from a cgroup file; 0 when absent.
func counter(dir, file, name string) int64 {
	if dir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// release kills what is left of the step (a process that left its
// process group) and removes its cgroups.
func (s *stepCgroups) release() {
	for _, dir := range s.dirs {
		removeCgroup(dir)
	}
}
