package event

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Sign's signatures verify, for each kind; any change of the body, the
// secret, the header or (for Stripe) the time past the tolerance does
// not; and the event is read from the provider's fields only once the
// signature verifies.
func TestDeliveriesVerifyBeforeTheyAreRead(t *testing.T) {
	now := time.Unix(1_767_225_600, 0)
	secret := []byte("whsec_abc")
	bodies := map[string]string{
		"github": `{"ref": "refs/heads/main"}`,
		"stripe": `{"id": "evt_1", "type": "charge.succeeded", "created": 1767225000, "data": {"object": {}}}`,
		"hmac":   `{"type": "order.paid", "id": "o-1", "data": {"amount": 5}, "time": "2026-01-01T00:00:00Z"}`,
	}
	for kind, body := range bodies {
		h := http.Header{"X-Github-Event": {"push"}, "X-Github-Delivery": {"d-1"}}
		k, v := Sign(kind, secret, []byte(body), now)
		h.Set(k, v)
		e, err := FromDelivery(kind, secret, h, []byte(body), now)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := e.Validate(now); err != nil {
			t.Errorf("%s: the event read does not validate: %v", kind, err)
		}
		for what, try := range map[string]func() error{
			"another body": func() error {
				_, err := FromDelivery(kind, secret, h, []byte(body+" "), now)
				return err
			},
			"another secret": func() error {
				_, err := FromDelivery(kind, []byte("whsec_abd"), h, []byte(body), now)
				return err
			},
			"no secret": func() error {
				_, err := FromDelivery(kind, nil, h, []byte(body), now)
				return err
			},
			"no signature": func() error {
				h2 := h.Clone()
				h2.Del(k)
				_, err := FromDelivery(kind, secret, h2, []byte(body), now)
				return err
			},
			"a signature that is not hex": func() error {
				h2 := h.Clone()
				h2.Set(k, strings.ReplaceAll(v, "a", "z"))
				_, err := FromDelivery(kind, secret, h2, []byte(body), now)
				return err
			},
		} {
			if err := try(); !errors.Is(err, ErrSignature) {
				t.Errorf("%s with %s: %v, want ErrSignature", kind, what, err)
			}
		}
	}
	body := []byte(bodies["stripe"])
	_, v := Sign("stripe", secret, body, now)
	for _, c := range []struct {
		at time.Time
		ok bool
	}{
		{now.Add(StripeTolerance), true}, {now.Add(-StripeTolerance), true},
		{now.Add(StripeTolerance + time.Second), false}, {now.Add(-StripeTolerance - time.Second), false},
	} {
		_, err := FromDelivery("stripe", secret, http.Header{"Stripe-Signature": {v}}, body, c.at)
		if (err == nil) != c.ok {
			t.Errorf("a Stripe signature checked %s after it was made: %v", c.at.Sub(now), err)
		}
	}
	// Stripe sends one v1 per secret while a secret is being rolled: any
	// one verifies.
	_, other := Sign("stripe", []byte("whsec_old"), body, now)
	rolled := other + ",v1=" + v[strings.Index(v, "v1=")+3:]
	if _, err := FromDelivery("stripe", secret, http.Header{"Stripe-Signature": {rolled}}, body, now); err != nil {
		t.Errorf("a rolled secret's header %q: %v", rolled, err)
	}
	// What the verified body lacks is named.
	for kind, c := range map[string]struct{ body, want string }{
		"github": {`[]`, "body: is not a JSON object"},
		"stripe": {`{"id": 1}`, "body: id and type must be strings"},
		"hmac":   {`{"type": "a", "time": "yesterday"}`, "body: type and id must be strings, data an object, time RFC 3339"},
	} {
		h := http.Header{"X-Github-Event": {"push"}}
		k, v := Sign(kind, secret, []byte(c.body), now)
		h.Set(k, v)
		if _, err := FromDelivery(kind, secret, h, []byte(c.body), now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want %q", kind, c.body, err, c.want)
		}
	}
}

// A GitHub delivery sent as a form carries its JSON in payload; one sent
// as a form without it (curl -d) is read as it is.
func TestGitHubFormBodies(t *testing.T) {
	secret := []byte("s")
	for body, want := range map[string]string{
		`payload=%7B%22a%22%3A1%7D`: `{"a":1}`,
		`{"a": 2}`:                  `{"a": 2}`,
	} {
		h := http.Header{"X-Github-Event": {"push"}, "X-Github-Delivery": {"d"}, "Content-Type": {"application/x-www-form-urlencoded"}}
		k, v := Sign("github", secret, []byte(body), time.Now())
		h.Set(k, v)
		e, err := FromDelivery("github", secret, h, []byte(body), time.Now())
		if err != nil || string(e.Data) != want {
			t.Errorf("%s: %s (%v), want %s", body, e.Data, err, want)
		}
	}
}
