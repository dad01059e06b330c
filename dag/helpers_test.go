package dag

import (
	"testing"

	"github.com/orrery-dev/orrery/dag/schedule"
)

func scheduleSpec(cron string) schedule.Spec { return schedule.Spec{Cron: schedule.Crons(cron)} }

func TestPayloadValues(t *testing.T) {
	t.Parallel()
	for payload, want := range map[string]int{
		``: 0, `5`: 1, `-1.5e3`: 1, `"a,[{"`: 1, `[]`: 1, `[1,2]`: 3, `{"a":1,"b":[]}`: 3, `[[],[],[]]`: 4,
		`["a\"],[", 1]`: 3, `{"k\\": "v"}`: 2, `{ "k" : "v" , "n" : null }`: 3, `[true,false,null]`: 4,
		`{"a":{"b":{"c":[0]}}}`: 5, `[{"a":0},{"a":0}]`: 5,
	} {
		if got := Payload(payload).Values(); got != want {
			t.Errorf("Values(%s) = %d, want %d", payload, got, want)
		}
	}
}
