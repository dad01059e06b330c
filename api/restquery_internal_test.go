package api

import (
	"testing"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// An enum in a query is its value's name, its short name in any case, or
// its number (as vanguard reads JSON's), each normalized to the name.
func TestQueryEnumValues(t *testing.T) {
	ed := orreryv1.JobStatus(0).Descriptor()
	for in, want := range map[string]string{
		"active": "JOB_STATUS_ACTIVE", "PAUSED": "JOB_STATUS_PAUSED", "Job_Status_Deleted": "JOB_STATUS_DELETED",
		"1": "JOB_STATUS_ACTIVE", "3": "JOB_STATUS_DELETED",
	} {
		if got, err := enumValue(ed, in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"7", "+1", "-1", "1.0", "actve", ""} {
		if got, err := enumValue(ed, in); err == nil {
			t.Errorf("%q: taken as %q", in, got)
		}
	}
}
