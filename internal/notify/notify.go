// Package notify delivers notifications: the webhooks a job names for run
// finishes (spec.callbacks) and alerts (spec.alerts.notify), written as
// rows by the watchdog.
//
// Every worker process runs a Deliverer for the queues it serves; a
// notification belongs to the queue of its job's first step, so it is
// delivered under the egress and secret policy of that queue's workers,
// like the job's own webhooks.
//
// # Claims, crashes and retries
//
// A delivery is three steps, none inside a long transaction:
//
//  1. ClaimNotifications: one statement takes due rows (FOR UPDATE SKIP
//     LOCKED), bumps their attempts and moves next_attempt_at to now +
//     Config.ClaimFor. A worker killed or stopped from here on leaves the
//     row due again when the claim runs out; another worker delivers it.
//  2. The POST, bounded by Timeout (less than ClaimFor).
//  3. RecordDelivery: delivered, failed for good, or pending with a
//     backoff, only if the row still carries this claim's attempts count.
//
// So delivery is at least once: a receiver dedupes by the Orrery-Delivery
// header (the notification id, the same on every retry). Nothing here
// touches runs or tasks: a slow or failing receiver never blocks or fails
// a run.
//
// # Signature
//
// With a secret (a secret reference the worker resolves for the job's
// namespace), the request carries Orrery-Signature: t=UNIX,v1=HEX, HEX
// being HMAC-SHA256 with the secret over "UNIX.BODY" (the scheme Stripe
// uses): a receiver recomputes it and refuses old timestamps to stop
// replays.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/store"
)

// Defaults.
const (
	DefaultMaxAttempts = 8
	DefaultTimeout     = 10 * time.Second
	// DefaultClaimFor is how long a claimed delivery stays with its worker.
	DefaultClaimFor = 30 * time.Second
	// MaxBackoff caps the wait between attempts.
	MaxBackoff = 10 * time.Minute
)

// Config configures a Deliverer.
type Config struct {
	Pool   *pgxpool.Pool
	Queues []string
	// Client posts; its transport applies the worker's egress policy.
	Client *http.Client
	// Secrets resolves header values and signing secrets per tenant and
	// namespace (the notification row's, read from the database).
	Secrets *executor.SecretPolicy
	// MaxAttempts per notification; default 8 (about 8 minutes of tries).
	MaxAttempts int
	// Timeout of one POST; default 10 s, and less than ClaimFor.
	Timeout time.Duration
	// ClaimFor: see DefaultClaimFor.
	ClaimFor time.Duration
	// Interval between polls when nothing is due; default 1 s.
	Interval time.Duration
	// Concurrency of deliveries; default 8.
	Concurrency int
	Logger      *slog.Logger
	Metrics     *metrics.Metrics
}

// Deliverer delivers the notifications of some queues.
type Deliverer struct {
	cfg Config
}

// New returns a Deliverer.
func New(cfg Config) (*Deliverer, error) {
	if cfg.Pool == nil || cfg.Client == nil {
		return nil, errors.New("notify: Config.Pool and Config.Client are required")
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.ClaimFor <= 0 {
		cfg.ClaimFor = DefaultClaimFor
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	cfg.Timeout = min(cfg.Timeout, cfg.ClaimFor*2/3)
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Deliverer{cfg: cfg}, nil
}

// Run delivers until ctx ends.
func (d *Deliverer) Run(ctx context.Context) error {
	for {
		n, err := d.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			d.cfg.Logger.Error("notification delivery", "err", err)
		}
		wait := d.cfg.Interval
		if n == d.cfg.Concurrency {
			wait = 0 // more may be due
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Pass claims and delivers one batch; it returns how many it claimed.
func (d *Deliverer) Pass(ctx context.Context) (int, error) {
	var rows []store.ClaimNotificationsRow
	claimed := time.Now()
	err := store.Retry(ctx, func() error {
		var err error
		rows, err = store.New(d.cfg.Pool).ClaimNotifications(ctx, store.ClaimNotificationsParams{
			Queues: d.cfg.Queues, ClaimSeconds: d.cfg.ClaimFor.Seconds(), Batch: int32(d.cfg.Concurrency)})
		return err
	})
	if err != nil {
		return 0, err
	}
	// One job's notifications in the order they were written (ids are
	// time-ordered), different jobs' side by side. A retry can still
	// overtake: receivers order by the body's "at".
	slices.SortFunc(rows, func(a, b store.ClaimNotificationsRow) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	byJob := map[uuid.UUID][]store.ClaimNotificationsRow{}
	for _, n := range rows {
		byJob[n.JobID] = append(byJob[n.JobID], n)
	}
	var wg sync.WaitGroup
	for _, ns := range byJob {
		wg.Go(func() {
			for _, n := range ns {
				// A job's rows go one after another: one whose claim could
				// run out during its POST is left to lapse and be taken
				// again, rather than posted twice (here and by whoever
				// takes it).
				if time.Since(claimed)+d.cfg.Timeout > d.cfg.ClaimFor {
					return
				}
				d.deliver(ctx, n)
			}
		})
	}
	wg.Wait()
	return len(rows), nil
}

// outcome of one attempt.
type outcome struct {
	code      *int32
	err       string
	permanent bool
}

// Status is where a notification's delivery stands (notifications.status).
type Status string

// Delivery statuses.
const (
	Pending   Status = "pending"   // not delivered yet; tried again at next_attempt_at
	Delivered Status = "delivered" // the receiver answered 2xx
	Failed    Status = "failed"    // given up: a permanent refusal, or out of attempts
)

// ParseStatus checks a delivery status given by a user ("" is any).
func ParseStatus(s string) (Status, bool) {
	switch st := Status(s); st {
	case "", Pending, Delivered, Failed:
		return st, true
	}
	return "", false
}

func (d *Deliverer) deliver(ctx context.Context, n store.ClaimNotificationsRow) {
	o := d.post(ctx, n)
	status, retry := Delivered, time.Duration(0)
	switch {
	case o.err == "":
	case o.permanent || int(n.Attempts) >= d.cfg.MaxAttempts:
		status = Failed
	default:
		status, retry = Pending, Backoff(int(n.Attempts))
	}
	// The error may quote the receiver (its status line): stored as text
	// the database keeps, or the record fails and the delivery repeats.
	p := store.RecordDeliveryParams{ID: n.ID, Attempts: n.Attempts, Status: string(status), LastError: executor.StorableError(o.err), RetryMs: float64(retry.Milliseconds())}
	if o.code != nil {
		p.StatusCode = pgtype.Int4{Int32: *o.code, Valid: true}
	}
	// The record outlives a cancelled ctx briefly, so that a shutdown
	// mid-delivery still writes what happened.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := store.Retry(rctx, func() error { _, err := store.New(d.cfg.Pool).RecordDelivery(rctx, p); return err }); err != nil {
		d.cfg.Logger.Warn("record notification delivery", "id", n.ID, "err", err)
		return
	}
	d.cfg.Metrics.Delivery(map[Status]string{Delivered: "delivered", Failed: "failed", Pending: "retry"}[status])
	if status == Failed {
		d.cfg.Logger.Warn("notification failed for good", "id", n.ID, "event", n.Event, "url", n.Url, "attempts", n.Attempts, "err", o.err)
	}
}

func (d *Deliverer) post(ctx context.Context, n store.ClaimNotificationsRow) outcome {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.Url, bytes.NewReader(n.Body))
	if err != nil {
		return outcome{err: err.Error(), permanent: true}
	}
	var headers map[string]string
	if err := json.Unmarshal(n.Headers, &headers); err != nil {
		return outcome{err: "stored headers: " + err.Error(), permanent: true}
	}
	for k, v := range headers {
		val, err := d.cfg.Secrets.Resolve(n.Tenant, n.Namespace, v)
		if err != nil {
			return outcome{err: err.Error(), permanent: executor.Refused(err)}
		}
		req.Header.Set(k, val)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "orrery")
	req.Header.Set("Orrery-Event", n.Event)
	req.Header.Set("Orrery-Delivery", n.ID.String())
	req.Header.Set("Orrery-Attempt", strconv.Itoa(int(n.Attempts)))
	if n.TraceParent != nil && *n.TraceParent != "" {
		req.Header.Set("traceparent", *n.TraceParent)
	}
	if n.Secret != "" {
		secret, err := d.cfg.Secrets.Resolve(n.Tenant, n.Namespace, n.Secret)
		if err != nil {
			return outcome{err: err.Error(), permanent: executor.Refused(err)}
		}
		req.Header.Set("Orrery-Signature", Sign([]byte(secret), time.Now(), n.Body))
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		var egress *executor.EgressError
		return outcome{err: err.Error(), permanent: errors.As(err, &egress)}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	code := int32(resp.StatusCode)
	if resp.StatusCode/100 == 2 {
		return outcome{code: &code}
	}
	// 410 Gone: the receiver says never again.
	return outcome{code: &code, err: "HTTP " + resp.Status, permanent: resp.StatusCode == http.StatusGone}
}

// Sign returns the Orrery-Signature header value of body at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	return fmt.Sprintf("t=%s,v1=%s", ts, hex.EncodeToString(mac.Sum(nil)))
}

// Verify checks an Orrery-Signature header against body and secret, and
// that its timestamp is within tolerance of now: what a receiver does.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range bytes.Split([]byte(header), []byte(",")) {
		k, v, _ := bytes.Cut(part, []byte("="))
		switch string(k) {
		case "t":
			ts = string(v)
		case "v1":
			sig = string(v)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("malformed signature header")
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return errors.New("signature timestamp outside the tolerance")
	}
	want := Sign(secret, time.Unix(unix, 0), body)
	if !hmac.Equal([]byte(want), []byte(header)) {
		return errors.New("signature does not match")
	}
	return nil
}

// Backoff is the wait after attempt n (1-based): 2^n seconds, full jitter
// in its upper half, at most MaxBackoff.
func Backoff(n int) time.Duration {
	d := min(time.Duration(1<<min(n, 20))*time.Second, MaxBackoff)
	return d/2 + rand.N(d/2+1)
}
