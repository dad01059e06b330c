package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

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
			for _, id := range choose(tt.states, tt.free) {
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
	got := choose([]*tenantState{{id: a, weight: 1, room: 1000, waiting: all}}, 6)
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
	for _, id := range choose([]*tenantState{{id: light, weight: 1, room: 1000, waiting: lt}, {id: heavy, weight: 3, room: 1000, waiting: ht}}, 8) {
		got += owner[id]
	}
	if got != "HHLHHHLH" {
		t.Fatalf("order %s, want HHLHHHLH (by held/weight after each slot)", got)
	}
}
