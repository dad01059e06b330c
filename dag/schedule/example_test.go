package schedule_test

import (
	"fmt"
	"time"

	"github.com/orrery-dev/orrery/dag/schedule"
)

// A cron in a time zone fires at the wall-clock time it names, across a
// daylight-saving change: 02:30 in Berlin does not exist on the last
// Sunday of March, so that day's run fires at 03:00, once; on the last
// Sunday of October 02:30 happens twice, and it fires once, at the first.
func ExampleSchedule_Next() {
	s, err := schedule.Parse(schedule.Spec{Cron: schedule.Crons("30 2 * * *"), Timezone: "Europe/Berlin"})
	if err != nil {
		panic(err)
	}
	at := time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC)
	for range 3 {
		at, _ = s.Next(at)
		fmt.Println(at.In(s.Location()).Format("Mon 2006-01-02 15:04 MST"))
	}
	at = time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)
	for range 3 {
		at, _ = s.Next(at)
		fmt.Println(at.In(s.Location()).Format("Mon 2006-01-02 15:04 MST"))
	}
	// Output:
	// Sat 2026-03-28 02:30 CET
	// Sun 2026-03-29 03:00 CEST
	// Mon 2026-03-30 02:30 CEST
	// Sun 2026-10-25 02:30 CEST
	// Mon 2026-10-26 02:30 CET
	// Tue 2026-10-27 02:30 CET
}

// Plan previews a schedule as `orrery schedule preview` does: the
// instants that fire, and those an exclusion (weekends by cron, a holiday
// by date) passes over, with why.
func ExampleSchedule_Plan() {
	s, err := schedule.Parse(schedule.Spec{Cron: schedule.Crons("0 9 * * *"), Timezone: "UTC",
		Exclude: &schedule.Exclude{Cron: []string{"* * * * 6,0"}, Dates: []string{"2026-12-25"}}})
	if err != nil {
		panic(err)
	}
	for _, p := range s.Plan(time.Date(2026, 12, 23, 12, 0, 0, 0, time.UTC), 3) {
		if p.Excluded != "" {
			fmt.Println(p.Instant.Format("Mon 01-02"), "excluded:", p.Excluded)
			continue
		}
		fmt.Println(p.Instant.Format("Mon 01-02 15:04"), "fires")
	}
	// Output:
	// Thu 12-24 09:00 fires
	// Fri 12-25 excluded: excluded by exclude.dates (2026-12-25)
	// Sat 12-26 excluded: excluded by exclude.cron[0] "* * * * 6,0"
	// Sun 12-27 excluded: excluded by exclude.cron[0] "* * * * 6,0"
	// Mon 12-28 09:00 fires
	// Tue 12-29 09:00 fires
}
