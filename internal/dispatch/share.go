package dispatch

import (
	"fmt"
	"math"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
)

// What a queue's live workers offer admission (docs/resources.md): their
// slots, and the capacity of each that declares one. A task is admitted
// only when one live worker's capacity could hold it; the queue's tasks
// in flight ask, together, at most InFlightPerSlot times the workers'
// capacity (as they hold at most that many tasks a slot); and tenants
// share the queue by their weighted dominant share (Dominant Resource
// Fairness: the largest of a tenant's share of the slots and of each
// resource).
type pool struct {
	slots int64
	// total is the declaring workers' capacity together; each, each one's.
	total resources.Vector
	each  []resources.Vector
	// undeclared: a live worker declares no capacity (a remote client of
	// before resources): it takes a task of any size, and resources bound
	// nothing in this queue.
	undeclared bool
}

func poolOf(rows []store.QueueCapacitiesRow) pool {
	var p pool
	for _, r := range rows {
		p.slots += int64(r.Slots)
		if !r.CapCpu.Valid {
			p.undeclared = true
			continue
		}
		c := resources.FromColumns(r.CapCpu.Int64, r.CapMemory.Int64, r.CapGpu.Int64, r.CapCustom)
		p.each = append(p.each, c)
		p.total = p.total.Add(c)
	}
	return p
}

// fits reports whether one live worker of the queue could run a task of
// need alone; when none could, why, naming the shortfall: "needs memory
// 100Gi; the largest worker of queue etl has 60Gi".
func (p pool) fits(need resources.Vector, queue string) (bool, string) {
	if p.undeclared || need.IsZero() {
		return true, ""
	}
	for _, c := range p.each {
		if need.FitsIn(c) {
			return true, ""
		}
	}
	queue = RemoteBase(BaseQueue(queue))
	if len(p.each) == 0 {
		return false, fmt.Sprintf("needs %s; no live worker of queue %s declares its capacity", need, queue)
	}
	for _, name := range need.Names() {
		var most int64
		for _, c := range p.each {
			most = max(most, c.Get(name))
		}
		if need.Get(name) > most {
			return false, fmt.Sprintf("needs %s %s; the largest worker of queue %s has %s", name, resources.Format(name, need.Get(name)), queue, resources.Format(name, most))
		}
	}
	return false, fmt.Sprintf("needs %s; no single worker of queue %s has all of it", need, queue)
}

// room reports whether the queue's tasks in flight, asking inFlight
// together, may take one more asking need: at most InFlightPerSlot times
// its workers' capacity in each resource need asks for (one it does not
// ask for it leaves as it is, even past the bound: a reservation, or
// workers gone).
func (p pool) room(inFlight, need resources.Vector) bool {
	if p.undeclared || need.IsZero() {
		return true
	}
	for _, name := range need.Names() {
		if inFlight.Get(name)+need.Get(name) > InFlightPerSlot*p.total.Get(name) {
			return false
		}
	}
	return true
}

// share is a tenant's dominant share of the queue, holding count tasks
// that ask held together: the largest of its share of the slots and of
// each resource the workers declare.
func (p pool) share(count int64, held resources.Vector) float64 {
	s := 0.0
	if p.slots > 0 {
		s = float64(count) / float64(p.slots*InFlightPerSlot)
	}
	if p.undeclared || held.IsZero() {
		return s
	}
	for _, name := range held.Names() {
		if t := p.total.Get(name); t > 0 {
			s = max(s, float64(held.Get(name))/float64(t*InFlightPerSlot))
		}
	}
	return s
}

// largest is, resource by resource, the most any live worker of the queue
// has (every one unbounded when a worker declares none): a task asking
// more of one could not be admitted.
func (p pool) largest() resources.Vector {
	if p.undeclared {
		return resources.Vector{CPU: math.MaxInt64, Memory: math.MaxInt64, GPU: math.MaxInt64}
	}
	var most resources.Vector
	for _, c := range p.each {
		most.CPU, most.Memory, most.GPU = max(most.CPU, c.CPU), max(most.Memory, c.Memory), max(most.GPU, c.GPU)
	}
	return most
}

// isLarge reports whether a task of need asks for half or more of what
// most (the queue's largest worker, read once for a pass) has of some
// resource: one that may wait behind a stream of smaller ones, for which
// the worker's gate reserves at once once admission did (TaskArgs.Reserve).
func isLarge(need, most resources.Vector) bool {
	for _, name := range need.Names() {
		if m := most.Get(name); m > 0 && 2*need.Get(name) >= m {
			return true
		}
	}
	return false
}
