package dispatch

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
)

// waitingTasks makes n candidates of one tenant at a priority, ready one
// second apart from base.
func waitingTasks(tenant uuid.UUID, n int, priority int32, base time.Time, aged bool) []store.AdmissionCandidatesRow {
	out := make([]store.AdmissionCandidatesRow, n)
	for i := range out {
		out[i] = store.AdmissionCandidatesRow{ID: uuid.New(), TenantID: tenant, Priority: priority, ReadyAt: base.Add(time.Duration(i) * time.Second), Aged: aged}
	}
	return out
}

func TestChooseShares(t *testing.T) {
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	tests := []struct {
		name   string
		states []*tenantState
		free   int64
		want   map[uuid.UUID]int
	}{
		{"weights 1:2:5 from nothing held", []*tenantState{
			{id: a, weight: 1, room: 1000, waiting: waitingTasks(a, 500, 3, base, false)},
			{id: b, weight: 2, room: 1000, waiting: waitingTasks(b, 500, 3, base, false)},
			{id: c, weight: 5, room: 1000, waiting: waitingTasks(c, 500, 3, base, false)},
		}, 80, map[uuid.UUID]int{a: 10, b: 20, c: 50}},
		{"slots held count: the tenant below its share catches up first", []*tenantState{
			{id: a, weight: 1, held: 0, room: 1000, waiting: waitingTasks(a, 50, 3, base, false)},
			{id: b, weight: 1, held: 30, room: 1000, waiting: waitingTasks(b, 50, 3, base, false)},
		}, 40, map[uuid.UUID]int{a: 35, b: 5}},
		{"a lone tenant gets every free slot", []*tenantState{
			{id: a, weight: 1, room: 1000, waiting: waitingTasks(a, 500, 3, base, false)},
		}, 200, map[uuid.UUID]int{a: 200}},
		{"a tenant at its quota room gets no more; the rest go to others", []*tenantState{
			{id: a, weight: 5, room: 3, waiting: waitingTasks(a, 50, 3, base, false)},
			{id: b, weight: 1, room: 1000, waiting: waitingTasks(b, 50, 3, base, false)},
		}, 20, map[uuid.UUID]int{a: 3, b: 17}},
		{"a tenant with fewer tasks than its share leaves the rest to others", []*tenantState{
			{id: a, weight: 1, room: 1000, waiting: waitingTasks(a, 5, 3, base, false)},
			{id: b, weight: 1, room: 1000, waiting: waitingTasks(b, 500, 3, base, false)},
		}, 100, map[uuid.UUID]int{a: 5, b: 95}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[uuid.UUID]int{}
			owner := map[uuid.UUID]uuid.UUID{}
			for _, s := range tt.states {
				for _, w := range s.waiting {
					owner[w.ID] = s.id
				}
			}
			for _, id := range choose(tt.states, tt.free, slotsOnly, resources.Vector{}, "etl") {
				got[owner[id]]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("shares %v, want %v", got, tt.want)
			}
		})
	}
}

func TestChooseOrderInsideATenant(t *testing.T) {
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	a := uuid.New()
	low := waitingTasks(a, 2, 4, base, false)
	agedLow := waitingTasks(a, 1, 4, base.Add(-10*time.Minute), true)
	critical := waitingTasks(a, 2, 1, base.Add(time.Minute), false)
	normal := waitingTasks(a, 1, 3, base.Add(-time.Minute), false)
	var all []store.AdmissionCandidatesRow
	for _, g := range [][]store.AdmissionCandidatesRow{low, normal, critical, agedLow} {
		all = append(all, g...)
	}
	got := choose([]*tenantState{{id: a, weight: 1, room: 1000, waiting: all}}, 6, slotsOnly, resources.Vector{}, "etl")
	want := []uuid.UUID{agedLow[0].ID, critical[0].ID, critical[1].ID, normal[0].ID, low[0].ID, low[1].ID}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order %v,\nwant  %v (aged first, then critical, normal, low; oldest first within each)", got, want)
	}
}

// The slots of one pass go to River in a weighted fair queue's order (by
// the share each brings its tenant to), not tenant by tenant: the light
// tenant's task is not always at the head of River's queue, where it would
// wait least and come back for its next slot sooner than its weight says.
func TestChooseOrderAcrossTenants(t *testing.T) {
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	light, heavy := uuid.New(), uuid.New()
	owner := map[uuid.UUID]string{}
	lt, ht := waitingTasks(light, 10, 3, base, false), waitingTasks(heavy, 10, 3, base, false)
	for _, c := range lt {
		owner[c.ID] = "L"
	}
	for _, c := range ht {
		owner[c.ID] = "H"
	}
	got := ""
	for _, id := range choose([]*tenantState{{id: light, weight: 1, room: 1000, waiting: lt}, {id: heavy, weight: 3, room: 1000, waiting: ht}}, 8, slotsOnly, resources.Vector{}, "etl") {
		got += owner[id]
	}
	if got != "HHLHHHLH" {
		t.Fatalf("order %s, want HHLHHHLH (by held/weight after each slot)", got)
	}
}

// slotsOnly is a queue whose workers offer slots and no resources a task
// asks for.
var slotsOnly = &pool{slots: 1000}

// sized are n waiting tasks of a tenant, each asking for need.
func sized(tenant uuid.UUID, n int, need resources.Vector) []store.AdmissionCandidatesRow {
	out := waitingTasks(tenant, n, 3, time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC), false)
	for i := range out {
		out[i].ResCpu, out[i].ResMemory, out[i].ResGpu = need.CPU, need.Memory, need.GPU
	}
	return out
}

// Tenants share a queue by their dominant resource (weighted DRF): a
// tenant of GPU steps and one of CPU steps, equal weights, each get the
// same share of what they use most, within what the workers have (twice
// their capacity in flight, as twice their slots).
func TestChooseByDominantShare(t *testing.T) {
	gpus, cpus := uuid.New(), uuid.New()
	p := poolOf(nil)
	p.slots = 1000
	for range 2 {
		c := resources.Vector{CPU: 5000, Memory: 64 << 30, GPU: 2}
		p.each, p.total = append(p.each, c), p.total.Add(c)
	}
	owner := map[uuid.UUID]uuid.UUID{}
	states := []*tenantState{
		{id: gpus, weight: 1, room: 1000, waiting: sized(gpus, 50, resources.Vector{CPU: 100, GPU: 1})},
		{id: cpus, weight: 1, room: 1000, waiting: sized(cpus, 50, resources.Vector{CPU: 1000})},
	}
	for _, s := range states {
		for _, w := range s.waiting {
			owner[w.ID] = s.id
		}
	}
	got := map[uuid.UUID]int{}
	for _, id := range choose(states, 100, &p, resources.Vector{}, "etl") {
		got[owner[id]]++
	}
	// 8 GPU tasks are all 2x4 GPUs allow (share 1); the CPU tenant's
	// share then grows alone, to 20 cores in flight (20 x 1 core: share 1).
	if got[gpus] != 8 || got[cpus] != 19 { // 8 x 100m of the 20 cores go to the GPU tasks
		t.Fatalf("GPU tenant %d, CPU tenant %d; want 8 and 19", got[gpus], got[cpus])
	}
}

// A task that fits no worker, or no room left, is passed over for one of
// its tenant's that fits (work-conserving), and says why it waits.
func TestChoosePassesOverWhatDoesNotFit(t *testing.T) {
	a := uuid.New()
	p := poolOf(nil)
	p.slots = 10
	for _, mem := range []int64{60 << 30, 16 << 30} {
		c := resources.Vector{CPU: 16000, Memory: mem}
		p.each, p.total = append(p.each, c), p.total.Add(c)
	}
	big := sized(a, 1, resources.Vector{CPU: 1000, Memory: 100 << 30})
	small := sized(a, 3, resources.Vector{CPU: 1000, Memory: 1 << 30})
	for i := range small {
		small[i].ReadyAt = big[0].ReadyAt.Add(time.Second) // younger than the big one
	}
	got := choose([]*tenantState{{id: a, weight: 1, room: 1000, waiting: append(big, small...)}}, 10, &p, resources.Vector{}, "etl")
	if len(got) != 3 || slices.Contains(got, big[0].ID) {
		t.Fatalf("chose %v; want the 3 small tasks, not the big one", got)
	}
	if ok, why := p.fits(need(big[0]), "etl"); ok || why != "needs memory 100Gi; the largest worker of queue etl has 60Gi" {
		t.Errorf("fits: %v %q", ok, why)
	}
	if ok, why := p.fits(resources.Vector{CPU: 17000}, "etl|acme"); ok || why != "needs cpu 17; the largest worker of queue etl has 16" {
		t.Errorf("fits in a bound queue: %v %q", ok, why)
	}
	mixed := poolOf(nil)
	for _, c := range []resources.Vector{{CPU: 16000, Memory: 1 << 30}, {CPU: 1000, Memory: 64 << 30}} {
		mixed.each, mixed.total = append(mixed.each, c), mixed.total.Add(c)
	}
	if ok, why := mixed.fits(resources.Vector{CPU: 8000, Memory: 8 << 30}, "etl"); ok || why != "needs cpu 8, memory 8Gi; no single worker of queue etl has all of it" {
		t.Errorf("fits no single worker: %v %q", ok, why)
	}
	// In flight already: 2 x capacity of memory is 152Gi; 150Gi held.
	if p.room(resources.Vector{Memory: 150 << 30}, resources.Vector{Memory: 4 << 30}) {
		t.Error("room past twice the capacity")
	}
}

// A tenant's quota in resources counts its tasks in flight in every queue
// (heldAll): it gets what keeps it within, the next tenant the rest.
func TestChooseKeepsATenantWithinItsResourceQuota(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	p := poolOf(nil)
	p.slots = 100
	c := resources.Vector{CPU: 16000, Memory: 64 << 30}
	p.each, p.total = []resources.Vector{c}, c
	owner := map[uuid.UUID]uuid.UUID{}
	states := []*tenantState{
		{id: a, weight: 1, room: 1000, waiting: sized(a, 10, resources.Vector{CPU: 750}),
			quota: resources.Vector{CPU: 2000}, heldAll: resources.Vector{CPU: 500}}, // 500m in flight elsewhere
		{id: b, weight: 1, room: 1000, waiting: sized(b, 3, resources.Vector{CPU: 750})},
	}
	for _, s := range states {
		for _, w := range s.waiting {
			owner[w.ID] = s.id
		}
	}
	got := map[uuid.UUID]int{}
	for _, id := range choose(states, 20, &p, resources.Vector{}, "etl") {
		got[owner[id]]++
	}
	if got[a] != 2 || got[b] != 3 { // 500m + 2 x 750m = 2000m
		t.Fatalf("tenant with a 2-core quota got %d, the other %d; want 2 and 3", got[a], got[b])
	}
}

// A task needing a whole worker, behind a steady stream of small ones: it
// lets them pass while it is fresh (backfill), and once it may reserve it
// holds back the room it needs, so the room gathers as the small ones end
// and a later pass admits it (no starvation of big tasks).
func TestChooseReservesForABigTaskThatHasWaited(t *testing.T) {
	big, stream := uuid.New(), uuid.New()
	p := poolOf(nil)
	p.slots = 4
	c := resources.Vector{CPU: 2000}
	p.each, p.total = []resources.Vector{c}, c // in flight: at most 4 cores, 8 tasks
	small := resources.Vector{CPU: 500}
	pass := func(mayReserve bool, inFlight resources.Vector, free int64) []uuid.UUID {
		b := sized(big, 1, resources.Vector{CPU: 2000})
		b[0].MayReserve = mayReserve
		states := []*tenantState{
			{id: big, weight: 1, room: 1000, waiting: b},
			// The stream's tenant holds what is in flight.
			{id: stream, weight: 1, held: inFlight.CPU / small.CPU, heldRes: inFlight, room: 1000, waiting: sized(stream, 20, small)},
		}
		id := b[0].ID // (choose takes the chosen out of waiting)
		got := choose(states, free, &p, inFlight, "etl")
		if slices.Contains(got, id) {
			return []uuid.UUID{big}
		}
		return got
	}
	// 3.5 cores in flight, a slot free: the fresh big task lets a small one pass.
	if got := pass(false, resources.Vector{CPU: 3500}, 1); len(got) != 1 || got[0] == big {
		t.Fatalf("fresh: chose %v; want one small task", got)
	}
	// Once it may reserve, the small ones wait for what it holds back.
	if got := pass(true, resources.Vector{CPU: 3500}, 1); len(got) != 0 {
		t.Fatalf("reserving: chose %d tasks; want none", len(got))
	}
	// The room has gathered: it goes.
	if got := pass(true, resources.Vector{CPU: 2000}, 4); len(got) == 0 || got[0] != big {
		t.Fatalf("room gathered: chose %v; want the big task", got)
	}
}

// Backfill around a reservation: while a big task holds back the memory
// it waits for, tasks that ask for none of it still go.
func TestChooseBackfillsAroundAReservation(t *testing.T) {
	big, other := uuid.New(), uuid.New()
	p := poolOf(nil)
	p.slots = 8
	c := resources.Vector{CPU: 4000, Memory: 4 << 30}
	p.each, p.total = []resources.Vector{c}, c // in flight: at most 8 cores, 8Gi
	b := sized(big, 1, resources.Vector{Memory: 4 << 30})
	b[0].MayReserve = true
	cpuOnly := sized(other, 2, resources.Vector{CPU: 500})
	withMemory := sized(other, 2, resources.Vector{CPU: 500, Memory: 1 << 30})
	for i := range withMemory {
		withMemory[i].ReadyAt = withMemory[i].ReadyAt.Add(-time.Hour) // older: first, if they could go
	}
	inFlight := resources.Vector{CPU: 1000, Memory: 6 << 30}
	want := []uuid.UUID{cpuOnly[0].ID, cpuOnly[1].ID}
	states := []*tenantState{
		{id: big, weight: 1, room: 1000, waiting: b},
		{id: other, weight: 1, held: 2, heldRes: inFlight, room: 1000, waiting: append(withMemory, cpuOnly...)},
	}
	got := choose(states, 8, &p, inFlight, "etl")
	slices.SortFunc(got, compareIDs)
	slices.SortFunc(want, compareIDs)
	if !slices.Equal(got, want) {
		t.Fatalf("chose %v; want only the two tasks asking no memory %v", got, want)
	}
}
