// Package event takes events published to a tenant (docs/events.md): each
// is written once per tenant, source and publisher's id, pending, in a
// shard whose scheduler node starts the runs of the jobs it matches
// (internal/scheduler, events.go).
package event

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// Bounds of an event.
const (
	MaxData = 256 << 10 // its data, as JSON
	MaxID   = 200       // the publisher's id, in characters
	// MaxAhead and MaxBehind bound its time against the server's clock.
	MaxAhead  = 24 * time.Hour
	MaxBehind = 366 * 24 * time.Hour
)

// An Event is one published.
type Event struct {
	Type string
	// ID is the publisher's id of the event: taken once in the tenant and
	// source.
	ID string
	// Data is a JSON object (nil: {}).
	Data []byte
	// Time is when it happened (nil: when it is received).
	Time *time.Time
	// Source is the hook it came through ("": published through the API).
	Source string
	// PublishedBy is the principal who published it through the API (""
	// for a hook's: a provider's), who is behind the runs it starts.
	PublishedBy string
}

// Published is what a publish wrote, or found.
type Published struct {
	ID         uuid.UUID // Orrery's id of the event
	Duplicate  bool      // its id was taken: the first event, nothing written
	ReceivedAt time.Time
}

// Validate checks e against its bounds at now, naming the field at fault.
func (e Event) Validate(now time.Time) error {
	if msg := schedule.ValidEventType(e.Type); msg != "" {
		return &dag.FieldError{Field: "type", Message: msg}
	}
	if msg := validID(e.ID); msg != "" {
		return &dag.FieldError{Field: "id", Message: msg}
	}
	if len(e.Data) > MaxData {
		return &dag.FieldError{Field: "data", Message: fmt.Sprintf("is %d bytes as JSON; the limit is %d", len(e.Data), MaxData)}
	}
	if len(e.Data) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(e.Data, &obj); err != nil {
			return &dag.FieldError{Field: "data", Message: "is not a JSON object"}
		}
	}
	if e.Time != nil {
		switch {
		case e.Time.After(now.Add(MaxAhead)):
			return &dag.FieldError{Field: "time", Message: fmt.Sprintf("%s is more than a day ahead of the server's clock", e.Time.UTC().Format(time.RFC3339))}
		case e.Time.Before(now.Add(-MaxBehind)):
			return &dag.FieldError{Field: "time", Message: fmt.Sprintf("%s is more than a year behind the server's clock", e.Time.UTC().Format(time.RFC3339))}
		}
	}
	return nil
}

// validID says what is wrong with a publisher's id ("" when nothing).
func validID(id string) string {
	switch n := utf8.RuneCountInString(id); {
	case id == "":
		return "name the event's id (the publisher's: a repeat of it is a duplicate)"
	case n > MaxID:
		return fmt.Sprintf("is %d characters; the limit is %d", n, MaxID)
	case !utf8.ValidString(id):
		return "is not valid UTF-8"
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return "has a character that does not print (a control character or a line break)"
		}
	}
	return ""
}

// Publish writes e to tenant, pending, in one statement; an id taken
// before answers the first event and writes nothing. shards is the
// cluster's shard count.
func Publish(ctx context.Context, pool *pgxpool.Pool, tenant uuid.UUID, shards int, e Event) (Published, error) {
	if err := e.Validate(time.Now()); err != nil {
		return Published{}, err
	}
	data := e.Data
	if len(data) == 0 {
		data = []byte("{}")
	}
	id := uuid.Must(uuid.NewV7())
	var out Published
	// A retried transaction, as every write of the engine's: under
	// SERIALIZABLE a repeat that meets the first event's row while the
	// events step marks it fails with a serialization failure.
	err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		row, err := q.InsertEvent(ctx, store.InsertEventParams{ID: id, TenantID: tenant, Source: e.Source, EventKey: e.ID, Type: e.Type,
			Data: data, Time: e.Time, Shard: int32(shard.Of(id, shards)), PublishedBy: e.PublishedBy})
		if err == nil {
			out = Published{ID: row.ID, ReceivedAt: row.ReceivedAt}
			return nil
		}
		if !store.IsNotFound(err) {
			return err
		}
		first, err := q.EventByKey(ctx, store.EventByKeyParams{TenantID: tenant, Source: e.Source, EventKey: e.ID})
		out = Published{ID: first.ID, Duplicate: true, ReceivedAt: first.ReceivedAt}
		return err
	})
	return out, err
}
