package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// Live run pages: one poller per run (in this process) reads the run
// every pollEvery while anyone watches it and fans each change out to
// every viewer's server-sent event stream. Each event carries the tasks
// whose status changed and, as its id, a fingerprint of the whole state;
// a viewer that reconnects with a Last-Event-ID other than the current
// fingerprint gets the whole state first, so nothing is lost across a
// reconnect. Each viewer is authorized when it subscribes (GetRun as its
// principal); a stream lasts at most maxStream, and the browser
// reconnects (and is authorized again).

const (
	pollEvery = 400 * time.Millisecond
	maxStream = 5 * time.Minute
	// subBuffer events may wait for a slow viewer; past it, its stream
	// ends and it reconnects.
	subBuffer = 32
	// Streams open at once, per principal and in all, on one server;
	// past them a new stream is 429.
	maxStreamsPerPrincipal = 8
	maxStreams             = 1000
	// writeWait bounds one write to a viewer that stopped reading.
	writeWait = 30 * time.Second
)

type event struct {
	ID   string
	Data []byte
}

type hub struct {
	runs orreryv1connect.RunServiceClient
	log  *slog.Logger

	mu      sync.Mutex
	feeds   map[string]*feed
	streams map[string]int // open streams per principal
	total   int
}

// feed is one run's poller and its viewers.
type feed struct {
	subs  map[chan event]bool
	state snapshot
	id    string // fingerprint of state
	done  bool   // the run finished: the poller stopped
}

func newHub(runs orreryv1connect.RunServiceClient, log *slog.Logger) *hub {
	return &hub{runs: runs, log: log, feeds: map[string]*feed{}, streams: map[string]int{}}
}

// fingerprint identifies a state.
func fingerprint(s snapshot) string {
	h := fnv.New64a()
	ids := make([]string, 0, len(s.Tasks))
	for id := range s.Tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fmt.Fprintf(h, "%s|%t", s.Run, s.Finished)
	for _, id := range ids {
		fmt.Fprintf(h, "|%s=%s", id, s.Tasks[id])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// open counts a stream of principal who, or says no past the limits.
func (h *hub) open(who string) (release func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams[who] >= maxStreamsPerPrincipal || h.total >= maxStreams {
		return nil, false
	}
	h.streams[who]++
	h.total++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.streams[who]--; h.streams[who] <= 0 {
			delete(h.streams, who)
		}
		h.total--
	}, true
}

// subscribe adds a viewer of a run whose state (read as the viewer) is
// first; it returns the events to send and a way to leave.
func (h *hub) subscribe(ctx context.Context, runID string, first snapshot) (<-chan event, func()) {
	ch := make(chan event, subBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[runID]
	if f == nil || f.done {
		f = &feed{subs: map[chan event]bool{}, state: first, id: fingerprint(first)}
		h.feeds[runID] = f
		if !first.Finished {
			go h.poll(context.WithoutCancel(ctx), runID, f)
		} else {
			f.done = true
		}
	}
	f.subs[ch] = true
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if f.subs[ch] {
			delete(f.subs, ch)
			close(ch)
		}
		if len(f.subs) == 0 && h.feeds[runID] == f {
			delete(h.feeds, runID)
		}
	}
}

// current returns the feed's state and fingerprint.
func (h *hub) current(runID string) (snapshot, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[runID]
	if f == nil {
		return snapshot{}, "", false
	}
	return f.state, f.id, true
}

// poll reads the run while it has viewers and it is not finished; ctx
// carries the principal of the viewer that started it (authorized).
func (h *hub) poll(ctx context.Context, runID string, f *feed) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for range t.C {
		h.mu.Lock()
		gone := len(f.subs) == 0 || h.feeds[runID] != f
		h.mu.Unlock()
		if gone {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := h.runs.GetRun(cctx, connect.NewRequest(&orreryv1.GetRunRequest{Id: runID}))
		cancel()
		if err != nil {
			h.log.Warn("web ui: live run poll failed", "run_id", runID, "err", err)
			h.end(runID, f)
			return
		}
		next := snapshotOf(res.Msg)
		h.publish(runID, f, next)
		if next.Finished {
			return
		}
	}
}

// publish sends the tasks that changed (and the run's status) to every
// viewer; a viewer too slow to take it is dropped (it reconnects).
func (h *hub) publish(runID string, f *feed, next snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := fingerprint(next)
	if id == f.id {
		return
	}
	diff := snapshot{Run: next.Run, Finished: next.Finished, Tasks: map[string]string{}}
	for tid, st := range next.Tasks {
		if f.state.Tasks[tid] != st {
			diff.Tasks[tid] = st
		}
	}
	f.state, f.id, f.done = next, id, next.Finished
	data, _ := json.Marshal(diff)
	for ch := range f.subs {
		select {
		case ch <- event{ID: id, Data: data}:
		default:
			delete(f.subs, ch)
			close(ch)
		}
	}
}

// end closes every viewer's stream (the poll failed: they reconnect and
// are authorized again).
func (h *hub) end(runID string, f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range f.subs {
		close(ch)
	}
	f.subs = map[chan event]bool{}
	if h.feeds[runID] == f {
		delete(h.feeds, runID)
	}
}

// runEvents streams a run's changes as server-sent events.
func (s *Server) runEvents(w http.ResponseWriter, r *http.Request, v *view) error {
	// Authorize this viewer and read the state it starts from.
	res, err := s.getRun(r, v)
	if err != nil {
		return err
	}
	id := res.GetRun().GetId()
	first := snapshotOf(res)
	release, ok := s.events.open(v.P.Tenant.String() + "/" + v.P.Name)
	if !ok {
		return errTooManyStreams
	}
	defer release()
	events, leave := s.events.subscribe(v.ctx, id, first)
	defer leave()
	rc := http.NewResponseController(w)
	// The server's read timeout bounds requests, not streams; each write
	// has its own deadline (writeWait).
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(writeWait))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	state, current, _ := s.events.current(id)
	if current == "" {
		state, current = first, fingerprint(first)
	}
	if r.Header.Get("Last-Event-ID") != current {
		data, _ := json.Marshal(state)
		if err := writeEvent(w, event{ID: current, Data: data}); err != nil {
			return nil
		}
	}
	_ = rc.Flush()
	if state.Finished {
		_, _ = fmt.Fprint(w, "event: end\ndata: {}\n\n")
		_ = rc.Flush()
		return nil
	}
	timeout := time.NewTimer(maxStream)
	defer timeout.Stop()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-api.Draining(r.Context()):
			return nil // the browser reconnects to the next server
		case <-timeout.C:
			return nil
		case <-keepalive.C:
			// The session may have ended (signed out, key revoked).
			if _, err := s.viewOf(r); err != nil {
				return nil
			}
			_ = rc.SetWriteDeadline(time.Now().Add(writeWait))
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return nil
			}
		case e, ok := <-events:
			if !ok {
				return nil
			}
			_ = rc.SetWriteDeadline(time.Now().Add(writeWait))
			if err := writeEvent(w, e); err != nil {
				return nil
			}
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}

func writeEvent(w http.ResponseWriter, e event) error {
	_, err := fmt.Fprintf(w, "id: %s\ndata: %s\n\n", e.ID, e.Data)
	return err
}
