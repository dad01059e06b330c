package dag

import (
	"testing"

	"github.com/orrery-dev/orrery/dag/schedule"
)

func scheduleSpec(cron string) schedule.Spec { return schedule.Spec{Cron: cron} }

func TestPayloadNodes(t *testing.T) {
	t.Parallel()
	for payload, want := range map[string]int{
		``: 0, `5`: 1, `"a,[{"`: 1, `[]`: 2, `[1,2]`: 3, `{"a":1,"b":[]}`: 4, `[[],[],[]]`: 7,
		`["a\"],[", 1]`: 3, `{"k\\": "v"}`: 2,
	} {
		if got := Payload(payload).Nodes(); got != want {
			t.Errorf("Nodes(%s) = %d, want %d", payload, got, want)
		}
	}
}
