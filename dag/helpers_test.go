package dag

import "github.com/orrery-dev/orrery/dag/schedule"

func scheduleSpec(cron string) schedule.Spec { return schedule.Spec{Cron: cron} }
