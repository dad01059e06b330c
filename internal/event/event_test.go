package event

import (
	"strings"
	"testing"
	"time"
)

// Every bound of an event is refused naming its field.
func TestEventBounds(t *testing.T) {
	now := time.Now()
	ahead, behind := now.Add(25*time.Hour), now.Add(-367*24*time.Hour)
	ok := Event{Type: "order.paid", ID: "evt_1", Data: []byte(`{"a": 1}`)}
	if err := ok.Validate(now); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(e *Event)
		want string
	}{
		{"no type", func(e *Event) { e.Type = "" }, "type: name the event type"},
		{"a type with a space", func(e *Event) { e.Type = "order paid" }, "type: \"order paid\": letters, digits"},
		{"a type too long", func(e *Event) { e.Type = strings.Repeat("a", 201) }, "type: is 201 characters; the limit is 200"},
		{"no id", func(e *Event) { e.ID = "" }, "id: name the event's id"},
		{"an id too long", func(e *Event) { e.ID = strings.Repeat("é", 201) }, "id: is 201 characters; the limit is 200"},
		{"an id with a line break", func(e *Event) { e.ID = "a\nb" }, "id: has a character that does not print"},
		{"data too big", func(e *Event) { e.Data = []byte(`{"a": "` + strings.Repeat("x", MaxData) + `"}`) }, "data: is 262153 bytes as JSON; the limit is 262144"},
		{"data not an object", func(e *Event) { e.Data = []byte(`[1, 2]`) }, "data: is not a JSON object"},
		{"a time a day ahead", func(e *Event) { e.Time = &ahead }, "time: " + ahead.UTC().Format(time.RFC3339) + " is more than a day ahead"},
		{"a time a year behind", func(e *Event) { e.Time = &behind }, "is more than a year behind"},
	} {
		e := ok
		c.edit(&e)
		err := e.Validate(now)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
