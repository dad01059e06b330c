// Package failpoint lets a test stop a process at an exact point of its
// work, instead of hoping a signal lands in the right 40 ms: the code names
// the place (Hit("worker/fetched")), and a test arms it with an action.
//
// Production code runs with a nil *Set, whose Hit does nothing. In-process
// tests arm points with Go functions (On); tests that run the orrery binary
// arm them through the ORRERY_FAILPOINTS environment variable, parsed by
// Parse:
//
//	ORRERY_FAILPOINTS='worker/fetched=kill'          SIGKILL this process at the first hit
//	ORRERY_FAILPOINTS='worker/fetched=kill@2'        ... at the second hit
//	ORRERY_FAILPOINTS='scheduler/fire-tx=stop'       SIGSTOP it (once; SIGCONT resumes it)
//
// Several points are separated by commas. The points each package offers
// are constants in that package, named Failpoint*.
package failpoint

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Set is a set of armed failpoints. A nil *Set is valid and arms nothing.
type Set struct {
	mu     sync.Mutex
	points map[string]*point
}

type point struct {
	hits   int
	at     int // fire at this hit (1-based); 0: at every hit
	action func()
	err    error // what Err returns when the point fires
}

// New returns an empty Set.
func New() *Set { return &Set{points: map[string]*point{}} }

// On arms name with action, run at every hit, on the goroutine that hits it.
func (s *Set) On(name string, action func()) {
	s.arm(name, &point{action: action})
}

// At arms name with action, run at hit number n only (1 is the first).
func (s *Set) At(name string, n int, action func()) {
	s.arm(name, &point{at: n, action: action})
}

func (s *Set) arm(name string, p *point) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.points == nil {
		s.points = map[string]*point{}
	}
	s.points[name] = p
}

// ErrAt arms name to make Err return err at hit number n only: for a
// point where the code meets an error it cannot cause on its own, such as
// the answer to a COMMIT that took effect being lost.
func (s *Set) ErrAt(name string, n int, err error) {
	s.arm(name, &point{at: n, err: err})
}

// ErrOn arms name to make Err return err at every hit, until Disarm.
func (s *Set) ErrOn(name string, err error) {
	s.arm(name, &point{err: err})
}

// Disarm takes name's failpoint away.
func (s *Set) Disarm(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.points, name)
}

// Hit runs the action armed at name, if any.
func (s *Set) Hit(name string) { _ = s.Err(name) }

// Err runs the action armed at name, if any, and returns the error armed
// with ErrAt when the point fires (nil otherwise).
func (s *Set) Err(name string) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	p := s.points[name]
	var action func()
	var err error
	if p != nil {
		p.hits++
		if p.at == 0 || p.at == p.hits {
			action, err = p.action, p.err
		}
	}
	s.mu.Unlock()
	if action != nil {
		action()
	}
	return err
}

// Parse reads failpoints from their text form (see the package doc); an
// empty spec gives a nil Set.
func Parse(spec string) (*Set, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	s := New()
	for _, item := range strings.Split(spec, ",") {
		name, act, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("failpoint %q: want NAME=ACTION", item)
		}
		act, nth, hasN := strings.Cut(act, "@")
		n := 1
		if hasN {
			var err error
			if n, err = strconv.Atoi(nth); err != nil || n < 1 {
				return nil, fmt.Errorf("failpoint %q: @N must be a positive number", item)
			}
		}
		var sig syscall.Signal
		switch act {
		case "kill":
			sig = syscall.SIGKILL
		case "stop":
			sig = syscall.SIGSTOP
		default:
			return nil, fmt.Errorf("failpoint %q: action must be kill or stop", item)
		}
		s.At(name, n, func() { _ = syscall.Kill(syscall.Getpid(), sig) })
	}
	return s, nil
}
