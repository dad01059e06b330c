package event

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-dev/orrery/dag"
)

// Signed webhooks (docs/events.md): a delivery to a source is verified
// with the source's secret before any of it is read, then becomes an
// event whose type, id and time come from the provider's fields:
//
//   - github: X-Hub-Signature-256 (sha256=HEX, an HMAC-SHA256 of the
//     body); type github.EVENT (X-GitHub-Event: github.push,
//     github.pull_request), id X-GitHub-Delivery, data the payload (an
//     application/json body, or the payload field of a form-encoded one).
//   - stripe: Stripe-Signature (t=UNIX,v1=HEX[,v1=HEX...], an
//     HMAC-SHA256 of "UNIX.body", within StripeTolerance of the server's
//     clock); type, id and time (created) from the event object, data the
//     whole object.
//   - hmac: X-Signature-256 (sha256=HEX, an HMAC-SHA256 of the body); the
//     body is what POST /api/v1/events takes: {type, id, data, time}.

// StripeTolerance is how far a Stripe signature's timestamp may be from
// the server's clock (Stripe's libraries' default): a delivery replayed
// later is refused.
const StripeTolerance = 5 * time.Minute

// MaxDelivery bounds a delivery's body: its data is at most MaxData.
const MaxDelivery = MaxData

// ErrSignature refuses a delivery whose signature is missing or does not
// verify with the source's secret.
var ErrSignature = errors.New("event: the delivery's signature does not verify with the source's secret")

// FromDelivery verifies a delivery to a source of kind with secret at now,
// and reads its event: ErrSignature (wrapped, saying what is missing)
// before anything of the body is parsed, or a *dag.FieldError naming what
// the verified body lacks. The event's Source is the caller's to set.
func FromDelivery(kind string, secret []byte, h http.Header, body []byte, now time.Time) (Event, error) {
	if len(secret) == 0 {
		return Event{}, fmt.Errorf("%w: the secret is empty", ErrSignature)
	}
	switch kind {
	case "github":
		if err := verifyHex(secret, h, "X-Hub-Signature-256", body); err != nil {
			return Event{}, err
		}
		return gitHubEvent(h, body)
	case "stripe":
		if err := verifyStripe(secret, h.Get("Stripe-Signature"), body, now); err != nil {
			return Event{}, err
		}
		return stripeEvent(body)
	case "hmac":
		if err := verifyHex(secret, h, "X-Signature-256", body); err != nil {
			return Event{}, err
		}
		return hmacEvent(body)
	}
	return Event{}, fmt.Errorf("event: unknown kind of source %q", kind)
}

// Sign returns the signature header a source of kind expects for body at
// now (tests, and senders written in Go).
func Sign(kind string, secret, body []byte, now time.Time) (header, value string) {
	switch kind {
	case "stripe":
		t := strconv.FormatInt(now.Unix(), 10)
		return "Stripe-Signature", "t=" + t + ",v1=" + hex.EncodeToString(mac(secret, []byte(t+"."), body))
	case "github":
		return "X-Hub-Signature-256", "sha256=" + hex.EncodeToString(mac(secret, nil, body))
	}
	return "X-Signature-256", "sha256=" + hex.EncodeToString(mac(secret, nil, body))
}

func mac(secret, prefix, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(prefix)
	m.Write(body)
	return m.Sum(nil)
}

// verifyHex checks a header of the form sha256=HEX against the body's
// HMAC-SHA256, in constant time.
func verifyHex(secret []byte, h http.Header, header string, body []byte) error {
	v := h.Get(header)
	if v == "" {
		return fmt.Errorf("%w: no %s header", ErrSignature, header)
	}
	sig, ok := strings.CutPrefix(v, "sha256=")
	got, err := hex.DecodeString(sig)
	if !ok || err != nil {
		return fmt.Errorf("%w: %s is not sha256=HEX", ErrSignature, header)
	}
	if !hmac.Equal(got, mac(secret, nil, body)) {
		return ErrSignature
	}
	return nil
}

// verifyStripe checks a Stripe-Signature header: any v1 signature of
// "t.body" verifies, and t is within StripeTolerance of now.
func verifyStripe(secret []byte, header string, body []byte, now time.Time) error {
	if header == "" {
		return fmt.Errorf("%w: no Stripe-Signature header", ErrSignature)
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: Stripe-Signature has no t= timestamp or no v1= signature", ErrSignature)
	}
	want := mac(secret, []byte(ts+"."), body)
	ok := false
	for _, s := range sigs {
		ok = hmac.Equal(s, want) || ok
	}
	if !ok {
		return ErrSignature
	}
	if d := now.Sub(time.Unix(t, 0)); d > StripeTolerance || d < -StripeTolerance {
		return fmt.Errorf("%w: its timestamp is %s from the server's clock, past the tolerance of %s", ErrSignature, d.Round(time.Second), StripeTolerance)
	}
	return nil
}

// jsonObject returns body if it is a JSON object.
func jsonObject(body []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, &dag.FieldError{Field: "body", Message: "is not a JSON object"}
	}
	return bytes.TrimSpace(body), nil
}

func gitHubEvent(h http.Header, body []byte) (Event, error) {
	name := h.Get("X-GitHub-Event")
	if name == "" {
		return Event{}, &dag.FieldError{Field: "X-GitHub-Event", Message: "the header is missing"}
	}
	payload := body
	// GitHub's form content type sends payload=JSON; a body sent as a
	// form that has no payload field (curl -d) is taken as it is.
	if ct, _, _ := mime.ParseMediaType(h.Get("Content-Type")); ct == "application/x-www-form-urlencoded" {
		if form, err := url.ParseQuery(string(body)); err == nil && form.Has("payload") {
			payload = []byte(form.Get("payload"))
		}
	}
	data, err := jsonObject(payload)
	if err != nil {
		return Event{}, err
	}
	return Event{Type: "github." + name, ID: h.Get("X-GitHub-Delivery"), Data: data}, nil
}

func stripeEvent(body []byte) (Event, error) {
	data, err := jsonObject(body)
	if err != nil {
		return Event{}, err
	}
	var obj struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Created int64  `json:"created"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return Event{}, &dag.FieldError{Field: "body", Message: "id and type must be strings, created a number"}
	}
	e := Event{Type: obj.Type, ID: obj.ID, Data: data}
	if obj.Created != 0 {
		t := time.Unix(obj.Created, 0).UTC()
		e.Time = &t
	}
	return e, nil
}

func hmacEvent(body []byte) (Event, error) {
	if _, err := jsonObject(body); err != nil {
		return Event{}, err
	}
	var obj struct {
		Type string          `json:"type"`
		ID   string          `json:"id"`
		Data json.RawMessage `json:"data"`
		Time *time.Time      `json:"time"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return Event{}, &dag.FieldError{Field: "body", Message: "type and id must be strings, data an object, time RFC 3339"}
	}
	if s := bytes.TrimSpace(obj.Data); bytes.Equal(s, []byte("null")) {
		obj.Data = nil
	}
	return Event{Type: obj.Type, ID: obj.ID, Data: obj.Data, Time: obj.Time}, nil
}
