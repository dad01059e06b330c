package dispatch

import (
	"strings"
	"testing"
)

func TestBoundQueue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ queue, tenant, want, wantErr string }{
		{queue: "etl", tenant: "acme", want: "etl|acme"},
		{queue: "etl-2", tenant: "team_data", want: "etl-2|team_data"},
		{queue: "etl", tenant: "acme.corp", wantErr: "takes letters and digits separated by single - or _"},
		{queue: "a.b", tenant: "acme", wantErr: "takes letters and digits"},
		{queue: "etl", tenant: "acme-", wantErr: "takes letters and digits"},
		{queue: "etl", tenant: "a--b", wantErr: "takes letters and digits"},
		{queue: "etl|acme", tenant: "x", wantErr: "takes letters and digits"},
		{queue: "etl", tenant: "a|b", wantErr: "takes letters and digits"},
		{queue: strings.Repeat("q", 40), tenant: strings.Repeat("t", 24), wantErr: "longer than 64 bytes"},
	} {
		got, err := BoundQueue(tt.queue, tt.tenant)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("BoundQueue(%q, %q) = %q, %v; want an error containing %q", tt.queue, tt.tenant, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("BoundQueue(%q, %q) = %q, %v; want %q", tt.queue, tt.tenant, got, err, tt.want)
		}
		if !riverQueueName.MatchString(got) || BaseQueue(got) != tt.queue || !BoundTo(got, tt.tenant) || BoundTo(tt.queue, tt.tenant) {
			t.Errorf("%q: not a River queue name, or BaseQueue/BoundTo disagree", got)
		}
	}
	if BaseQueue("etl") != "etl" || BoundTo("etl|acme", "acm") {
		t.Error("BaseQueue of a shared queue, or BoundTo of another tenant")
	}
}
