package api

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/orrery-dev/orrery/dag"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/store"
)

// auditServer implements orrery.v1.AuditService: it reads audit_log, which
// the engine appends to in the transaction of every control-plane change.
// It only reads; nothing in the API changes or deletes audit rows.
type auditServer struct {
	orreryv1connect.UnimplementedAuditServiceHandler
	pool *pgxpool.Pool
	log  *slog.Logger
}

// auditToken is the keyset position of a page: the last entry shown.
type auditToken struct {
	At time.Time `json:"a"`
	ID uuid.UUID `json:"i"`
}

// firstAuditPage is the position before every row: audit rows are written
// at the database's now(), never after 9999.
var firstAuditPage = auditToken{At: time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC), ID: uuid.Max}

func (s *auditServer) ListAudit(ctx context.Context, req *connect.Request[orreryv1.ListAuditRequest]) (*connect.Response[orreryv1.ListAuditResponse], error) {
	p, size, err := auditParams(actor(ctx), req.Msg)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	p.Budget = job.ListBudgetBytes // entries carry whole definitions
	listed, err := store.New(s.pool).ListAudit(ctx, p)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	var pageRows int64
	if len(listed) > 0 {
		pageRows = listed[0].PageRows
	}
	token := func(r store.ListAuditRow) any { return auditToken{At: r.At, ID: r.ID} }
	rows, next := store.NextBudgetedPage(listed, size, pageRows, token)
	out := &orreryv1.ListAuditResponse{Entries: make([]*orreryv1.AuditEntry, 0, len(rows)), NextPageToken: next}
	values := 0
	for i, r := range rows {
		// Each value of before and after becomes part of the diff.
		if values += dag.Payload(r.Before).Values() + dag.Payload(r.After).Values(); i > 0 && values > job.ListBudgetValues {
			out.NextPageToken = store.EncodePageToken(token(rows[i-1]))
			break
		}
		out.Entries = append(out.Entries, auditEntryToProto(ctx, s.log, r.ID, r.At, r.Actor, r.Action, r.TargetKind, r.TargetID, r.TargetName, r.Before, r.After))
	}
	return connect.NewResponse(out), nil
}

// auditEntryToProto is one audit row with its field-level changes.
func auditEntryToProto(ctx context.Context, log *slog.Logger, id uuid.UUID, at time.Time, actor, action, kind string, target uuid.UUID,
	name string, before, after []byte) *orreryv1.AuditEntry {
	e := &orreryv1.AuditEntry{
		Id: id.String(), Time: timestamppb.New(at), Actor: actor, Action: action,
		TargetKind: kind, TargetId: target.String(), TargetName: name,
		Before: string(before), After: string(after),
	}
	var err error
	if e.Changes, err = diffJSON(before, after); err != nil {
		// JSONB is valid JSON, so this cannot happen; the entry is still shown.
		log.ErrorContext(ctx, "audit entry: cannot diff before/after", "id", id, "err", err)
	}
	return e
}

// auditParams checks a request and turns it into the query's parameters,
// scoped to the caller's tenant, and the page size.
func auditParams(a job.Actor, m *orreryv1.ListAuditRequest) (store.ListAuditParams, int, error) {
	size, err := job.PageSize(int(m.GetPageSize()))
	if err != nil {
		return store.ListAuditParams{}, 0, err
	}
	before := firstAuditPage
	if m.GetPageToken() != "" {
		if store.DecodePageToken(m.GetPageToken(), &before) != nil {
			return store.ListAuditParams{}, 0, &dag.FieldError{Field: "page_token", Message: "malformed; pass back next_page_token"}
		}
	}
	p := store.ListAuditParams{TenantID: a.Tenant, BeforeAt: before.At, BeforeID: before.ID, PageSize: int32(size + 1)}
	for _, f := range []struct {
		field, value string
		param        **string
	}{
		{"actor", m.GetActor(), &p.Actor},
		{"action", m.GetAction(), &p.Action},
		{"target_kind", m.GetTargetKind(), &p.TargetKind},
		{"target_name", m.GetTargetName(), &p.TargetName},
	} {
		if f.value == "" {
			continue
		}
		if strings.ContainsRune(f.value, 0) {
			// PostgreSQL text cannot hold NUL: no row matches, and the
			// database would refuse the parameter.
			return store.ListAuditParams{}, 0, &dag.FieldError{Field: f.field, Message: "contains a NUL character"}
		}
		*f.param = &f.value
	}
	if m.GetTargetId() != "" {
		id, err := parseID("target_id", m.GetTargetId())
		if err != nil {
			return store.ListAuditParams{}, 0, err
		}
		p.TargetID = &id
	}
	if m.GetSince() != nil {
		t, err := timeFromProto("since", m.GetSince())
		if err != nil {
			return store.ListAuditParams{}, 0, err
		}
		p.Since = &t
	}
	if m.GetUntil() != nil {
		t, err := timeFromProto("until", m.GetUntil())
		if err != nil {
			return store.ListAuditParams{}, 0, err
		}
		p.Until = &t
	}
	if p.Since != nil && p.Until != nil && !p.Until.After(*p.Since) {
		return store.ListAuditParams{}, 0, &dag.FieldError{Field: "until", Message: "must be after since"}
	}
	return p, size, nil
}

// diffJSON lists the fields that differ between two JSON objects (either
// may be absent: nil), sorted by path. It descends into objects present on
// either side; anything else (strings, numbers, arrays, null) is compared
// whole. Numbers keep their digits (no float64 rounding).
func diffJSON(before, after []byte) ([]*orreryv1.FieldChange, error) {
	b, bok, err := decodeJSON(before)
	if err != nil {
		return nil, err
	}
	a, aok, err := decodeJSON(after)
	if err != nil {
		return nil, err
	}
	out := []*orreryv1.FieldChange{}
	diffValue("", b, bok, a, aok, &out)
	return out, nil
}

func decodeJSON(b []byte) (any, bool, error) {
	if len(b) == 0 {
		return nil, false, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func diffValue(path string, b any, bok bool, a any, aok bool, out *[]*orreryv1.FieldChange) {
	bm, bobj := b.(map[string]any)
	am, aobj := a.(map[string]any)
	if (bobj || !bok) && (aobj || !aok) {
		keys := make([]string, 0, len(bm)+len(am))
		for k := range bm {
			keys = append(keys, k)
		}
		for k := range am {
			if _, dup := bm[k]; !dup {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			bv, bin := bm[k]
			av, ain := am[k]
			diffValue(joinPath(path, k), bv, bin, av, ain, out)
		}
		return
	}
	var bs, as string
	if bok {
		bs = encodeJSON(b)
	}
	if aok {
		as = encodeJSON(a)
	}
	if bok && aok && bs == as {
		return
	}
	*out = append(*out, &orreryv1.FieldChange{Path: path, Before: bs, After: as})
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// joinPath appends an object key to a path: .key, or ["key"] when the key
// would be ambiguous after a dot (labels["app.kubernetes.io/name"]).
func joinPath(path, key string) string {
	if plainKey.MatchString(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + encodeJSON(key) + "]"
}

// encodeJSON writes a decoded value back as compact JSON, object keys
// sorted, <>& as themselves.
func encodeJSON(v any) string {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	_ = e.Encode(v) // decoded from JSON: always encodable
	return strings.TrimSuffix(buf.String(), "\n")
}
