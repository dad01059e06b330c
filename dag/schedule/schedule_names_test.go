package schedule

import "testing"

// An after naming dead_lettered, as specs written for earlier versions do,
// starts on a failed run; a run an earlier version ended dead_lettered
// starts an after naming failed.
func TestNamesTakesDeadLetteredForFailed(t *testing.T) {
	for _, tt := range []struct {
		on     []string
		status string
		want   bool
	}{
		{[]string{"failed"}, "failed", true},
		{[]string{"dead_lettered"}, "failed", true},
		{[]string{"failed"}, "dead_lettered", true},
		{[]string{"succeeded"}, "failed", false},
		{[]string{"succeeded", "cancelled"}, "cancelled", true},
		{nil, "succeeded", false},
	} {
		if got := Names(tt.on, tt.status); got != tt.want {
			t.Errorf("Names(%v, %s) = %v, want %v", tt.on, tt.status, got, tt.want)
		}
	}
}
