package api_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/engine/executor"
)

// deliver posts body to a hook with headers, as a provider does (no key).
func deliver(t *testing.T, url, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json") // unless headers say
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// hexMAC is HMAC-SHA256(secret, msg) in hex, computed here as a provider
// would, not by the package under test.
func hexMAC(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Event sources end to end over REST: an admin creates them (an editor may
// not; a taken name, an unknown kind and a secret's value instead of a
// reference are refused naming the field, and nothing is written); a
// GitHub-style delivery (also form-encoded) and a Stripe-style one, each
// with a real HMAC, become events with the provider's type, id and time;
// a repeat is a duplicate; a bad signature, a stale Stripe timestamp, an
// unknown source and a deleted one are 401 and write nothing; a body past
// the bound is 413; a secret this server may not read is 503; a client
// that keeps failing is throttled.
func TestSignedDeliveriesBecomeEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secrets := map[string]string{"gh": "It's a Secret to Everybody", "stripe": "whsec_test123", "hmac": "s3cret"}
	for name, v := range secrets {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	policy := &executor.SecretPolicy{Dirs: map[string][]string{"default/hooks": {dir}}}
	base, keys, pool := authServerWith(t, policy)
	admin := keys["admin"]

	create := func(key, body string) (int, string) {
		status, _, b := rest(t, http.MethodPost, base+"/api/v1/sources", key, body)
		return status, b
	}
	for name, kind := range map[string]string{"gh": "github", "stripe": "stripe", "hmac": "hmac"} {
		status, body := create(admin, fmt.Sprintf(`{"name": %q, "kind": %q, "namespace": "hooks", "secret": "secret://file%s/%s"}`, name, kind, dir, name))
		if status != http.StatusOK || !strings.Contains(body, `"hookPath":"/api/v1/hooks/default:`+name+`"`) {
			t.Fatalf("create %s: %d %s", name, status, body)
		}
	}
	audits := count(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'create_source'")
	for _, c := range []struct {
		key, body string
		status    int
		want      string
	}{
		{keys["editor"], `{"name": "x", "kind": "github", "secret": "secret://env/X"}`, http.StatusForbidden, ""},
		{admin, `{"name": "gh", "kind": "github", "secret": "secret://env/X"}`, http.StatusConflict, `source \"gh\"`},
		{admin, `{"name": "x", "kind": "gitlab", "secret": "secret://env/X"}`, http.StatusUnprocessableEntity, "kind:"},
		{admin, `{"name": "x", "kind": "github", "secret": "hunter2"}`, http.StatusUnprocessableEntity, "secret:"},
		{admin, `{"name": "X!", "kind": "github", "secret": "secret://env/X"}`, http.StatusUnprocessableEntity, "name:"},
	} {
		status, body := create(c.key, c.body)
		if status != c.status || !strings.Contains(body, c.want) || strings.Contains(body, "hunter2") {
			t.Errorf("create %s: %d %s; want %d naming %q", c.body, status, body, c.status, c.want)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'create_source'"); n != audits {
		t.Errorf("refused creations wrote %d audit entries", n-audits)
	}
	if status, _, body := rest(t, http.MethodGet, base+"/api/v1/sources", keys["reader"], ""); status != http.StatusOK || strings.Count(body, `"kind"`) != 3 {
		t.Errorf("list: %d %s", status, body)
	}

	events := func() int { return count(t, pool, "SELECT count(*) FROM events") }
	hook := base + "/api/v1/hooks/default:"

	// GitHub: X-Hub-Signature-256 over the body as sent.
	push := `{"ref": "refs/heads/main", "after": "abc123"}`
	gh := map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"X-Hub-Signature-256": "sha256=" + hexMAC(secrets["gh"], push)}
	if status, body := deliver(t, hook+"gh", push, gh); status != http.StatusAccepted || !strings.Contains(body, `"duplicate":false`) {
		t.Fatalf("github delivery: %d %s", status, body)
	}
	if n := count(t, pool, `SELECT count(*) FROM events WHERE source = 'gh' AND type = 'github.push' AND event_key = $1 AND data->>'after' = 'abc123'`,
		gh["X-GitHub-Delivery"]); n != 1 {
		t.Errorf("the github event as written: %d rows match", n)
	}
	if status, body := deliver(t, hook+"gh", push, gh); status != http.StatusOK || !strings.Contains(body, `"duplicate":true`) {
		t.Errorf("github redelivery: %d %s", status, body)
	}
	// A form-encoded delivery: the signature is over the form.
	form := "payload=" + url.QueryEscape(`{"zen": "Keep it logically awesome."}`)
	status, body := deliver(t, hook+"gh", form, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-2",
		"X-Hub-Signature-256": "sha256=" + hexMAC(secrets["gh"], form)})
	if status != http.StatusAccepted || count(t, pool, `SELECT count(*) FROM events WHERE type = 'github.ping' AND data->>'zen' <> ''`) != 1 {
		t.Errorf("form-encoded github delivery: %d %s", status, body)
	}

	// Stripe: t=UNIX,v1=HMAC("UNIX.body"); the type, id and time are the
	// event object's.
	now := time.Now().Unix()
	paid := `{"id": "evt_1", "object": "event", "type": "payment_intent.succeeded", "created": 1767225600, "data": {"object": {"amount": 2000}}}`
	stripeSig := func(ts int64, b string) map[string]string {
		return map[string]string{"Stripe-Signature": fmt.Sprintf("t=%d,v1=%s,v0=ignored", ts, hexMAC(secrets["stripe"], fmt.Sprintf("%d.%s", ts, b)))}
	}
	if status, body := deliver(t, hook+"stripe", paid, stripeSig(now, paid)); status != http.StatusAccepted {
		t.Fatalf("stripe delivery: %d %s", status, body)
	}
	if n := count(t, pool, `SELECT count(*) FROM events WHERE source = 'stripe' AND type = 'payment_intent.succeeded' AND event_key = 'evt_1'
		AND time = '2026-01-01T00:00:00Z' AND (data->'data'->'object'->>'amount')::int = 2000`); n != 1 {
		t.Errorf("the stripe event as written: %d rows match", n)
	}

	// The generic HMAC: the body is what POST /api/v1/events takes.
	order := `{"type": "order.paid", "id": "o-1", "data": {"amount": 150}}`
	if status, body := deliver(t, hook+"hmac", order, map[string]string{"X-Signature-256": "sha256=" + hexMAC(secrets["hmac"], order)}); status != http.StatusAccepted {
		t.Fatalf("hmac delivery: %d %s", status, body)
	}

	// Refusals: none writes anything.
	before := events()
	paid2 := strings.Replace(paid, "evt_1", "evt_2", 1)
	for _, c := range []struct {
		what, url, body string
		headers         map[string]string
		status          int
	}{
		{"a github body changed after signing", hook + "gh", strings.Replace(push, "abc123", "evil", 1), gh, http.StatusUnauthorized},
		{"no signature", hook + "gh", push, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-3"}, http.StatusUnauthorized},
		{"another source's secret", hook + "hmac", order, map[string]string{"X-Signature-256": "sha256=" + hexMAC(secrets["gh"], order)}, http.StatusUnauthorized},
		{"a stripe signature 10 minutes old", hook + "stripe", paid2, stripeSig(now-600, paid2), http.StatusUnauthorized},
		{"a stripe signature of another timestamp", hook + "stripe", paid2,
			map[string]string{"Stripe-Signature": fmt.Sprintf("t=%d,v1=%s", now, hexMAC(secrets["stripe"], fmt.Sprintf("%d.%s", now-1, paid2)))}, http.StatusUnauthorized},
		{"an unknown source", hook + "nope", push, gh, http.StatusUnauthorized},
		{"another tenant's name", base + "/api/v1/hooks/other:gh", push, gh, http.StatusUnauthorized},
		{"a path without a tenant", base + "/api/v1/hooks/gh", push, gh, http.StatusUnauthorized},
		{"a verified body that is no object", hook + "hmac", `[1]`, map[string]string{"X-Signature-256": "sha256=" + hexMAC(secrets["hmac"], `[1]`)}, http.StatusUnprocessableEntity},
		{"a verified body without an id", hook + "hmac", `{"type": "order.paid"}`,
			map[string]string{"X-Signature-256": "sha256=" + hexMAC(secrets["hmac"], `{"type": "order.paid"}`)}, http.StatusUnprocessableEntity},
		{"a body past 256 KiB", hook + "gh", `{"x": "` + strings.Repeat("a", 300<<10) + `"}`, gh, http.StatusRequestEntityTooLarge},
	} {
		status, body := deliver(t, c.url, c.body, c.headers)
		if status != c.status {
			t.Errorf("%s: %d %s; want %d", c.what, status, body, c.status)
		}
		if status == http.StatusUnauthorized && !strings.Contains(body, "signature does not verify") {
			t.Errorf("%s: %s", c.what, body)
		}
	}
	if n := events(); n != before {
		t.Errorf("refused deliveries wrote %d events", n-before)
	}

	// A source whose secret this server may not read: 503, the operator's
	// to fix (a namespace without a grant).
	if status, body := create(admin, `{"name": "ungranted", "kind": "hmac", "secret": "secret://env/HOME"}`); status != http.StatusOK {
		t.Fatalf("create ungranted: %d %s", status, body)
	}
	if status, body := deliver(t, hook+"ungranted", order, map[string]string{"X-Signature-256": "sha256=00"}); status != http.StatusServiceUnavailable ||
		strings.Contains(body, os.Getenv("HOME")) {
		t.Errorf("ungranted secret: %d %s", status, body)
	}

	// Deleted: its deliveries are refused; its events stay.
	if status, _, body := rest(t, http.MethodDelete, base+"/api/v1/sources/hmac", admin, ""); status != http.StatusOK {
		t.Fatalf("delete: %d %s", status, body)
	}
	order2 := strings.Replace(order, "o-1", "o-2", 1)
	if status, _ := deliver(t, hook+"hmac", order2, map[string]string{"X-Signature-256": "sha256=" + hexMAC(secrets["hmac"], order2)}); status != http.StatusUnauthorized {
		t.Errorf("a delivery to a deleted source: %d", status)
	}
	if n := count(t, pool, "SELECT count(*) FROM events WHERE source = 'hmac'"); n != 1 {
		t.Errorf("the deleted source's events: %d, want 1", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM audit_log WHERE action IN ('create_source', 'delete_source') AND coalesce(after::text, '') NOT LIKE '%s3cret%' AND coalesce(before::text, '') NOT LIKE '%s3cret%'"); n != 5 {
		t.Errorf("audited source changes: %d, want 5", n)
	}

	// A client that keeps failing is throttled before any lookup.
	throttled := false
	for range 40 {
		status, _ := deliver(t, hook+"gh", push+" ", gh)
		throttled = throttled || status == http.StatusTooManyRequests
	}
	if !throttled {
		t.Error("40 bad signatures from one address were never throttled")
	}
}
