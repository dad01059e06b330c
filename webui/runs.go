package webui

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/webui/internal/layout"
)

// maxDrawnPerLayer caps the nodes drawn in one column of a run's graph;
// "draw all" lifts it.
const maxDrawnPerLayer = 60

// runID reads the {id} of a path; anything but a UUID is a 404.
func runID(r *http.Request) (string, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return "", errNotFound
	}
	return id.String(), nil
}

// getRun reads the path's run, with its tasks, as the viewer.
func (s *Server) getRun(r *http.Request, v *view) (*orreryv1.GetRunResponse, error) {
	id, err := runID(r)
	if err != nil {
		return nil, err
	}
	req := &orreryv1.GetRunRequest{Id: id, ItemsOf: r.URL.Query().Get("items")}
	if from, err := strconv.ParseInt(r.URL.Query().Get("from"), 10, 32); err == nil && req.ItemsOf != "" {
		req.ItemsFrom = int32(from)
	}
	res, err := s.clients.runs.GetRun(v.ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// runPage shows a run: its DAG as inline SVG (each task a node with
// data-task and data-status, updated live), its tasks, and the attempts
// of the selected task.
func (s *Server) runPage(w http.ResponseWriter, r *http.Request, v *view) error {
	res, err := s.getRun(r, v)
	if err != nil {
		return err
	}
	run, tasks := res.GetRun(), res.GetTasks()
	all := r.URL.Query().Get("all") == "1"
	var selected *orreryv1.Task
	for _, t := range append(tasks, res.GetItems()...) {
		if q := r.URL.Query(); t.GetId() == q.Get("task") || (q.Get("step") != "" && t.GetStep() == q.Get("step")) {
			selected = t
		}
	}
	canEdit := v.can(access.Editor, run.GetNamespace(), run.GetJob())
	var params []struct{ Name, Value string }
	for _, k := range slices.Sorted(maps.Keys(run.GetParams().GetFields())) {
		b, _ := protojson.Marshal(run.GetParams().GetFields()[k])
		params = append(params, struct{ Name, Value string }{k, string(b)})
	}
	var approvals []*orreryv1.Task // the steps asking for an approval now
	for _, t := range tasks {
		if t.GetApproval() != nil {
			approvals = append(approvals, t)
		}
	}
	s.render(w, r, v, http.StatusOK, "run", map[string]any{
		"Params": params, "Approvals": approvals, "Retryable": lifecycle.RunStatus(run.GetStatus()).AcceptsRetry(), "Upstream": run.GetUpstream().AsMap(), "Event": eventView(run.GetEvent().AsMap()),
		"Run": run, "Tasks": tasks, "Graph": drawRun(run.GetId(), tasks, all), "All": all, "Selected": selected,
		"Timeline": buildTimeline(tasks, time.Now()),
		"Items":    itemsOf(r, res),
		"CanEdit":  canEdit, "CanRetry": v.can(access.Admin, run.GetNamespace(), run.GetJob()),
		"Finished": run.GetFinishTime() != nil,
		"CLI":      "orrery runs get " + run.GetId(),
	})
	return nil
}

// items is the page of a fan-out's items the run page lists (?items=STEP
// &from=N), with the link to the next page.
type items struct {
	Step  string
	Tasks []*orreryv1.Task
	From  int // the index this page starts from
	Next  int // the index the next page starts from (0: none)
}

func itemsOf(r *http.Request, res *orreryv1.GetRunResponse) *items {
	step := r.URL.Query().Get("items")
	if step == "" {
		return nil
	}
	out := &items{Step: step, Tasks: res.GetItems()}
	if len(out.Tasks) > 0 {
		out.From = int(out.Tasks[0].GetItemIndex())
	}
	for _, t := range res.GetTasks() {
		if t.GetStep() == step && len(out.Tasks) > 0 {
			if last := out.Tasks[len(out.Tasks)-1].GetItemIndex(); int(last)+1 < int(t.GetItems().GetTotal()) {
				out.Next = int(last) + 1
			}
		}
	}
	return out
}

// itemCounts says a fan-out's items by status ("7 succeeded, 2
// running"), in the order of a task's life.
func itemCounts(c *orreryv1.ItemCounts) string {
	var parts []string
	for _, st := range lifecycle.TaskStatuses {
		if n := c.GetByStatus()[string(st)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, ", ")
}

// graph is a run's DAG, laid out and ready to draw.
type graph struct {
	Width, Height float64
	Nodes         []graphNode
	Edges         []layout.Path
	Hidden        int
}

type graphNode struct {
	ID, Step, Status string
	X, Y, W, H       float64
	Href             string
	Label, Title     string
}

func drawRun(runID string, tasks []*orreryv1.Task, all bool) graph {
	nodes := make([]layout.Node, len(tasks))
	byStep := map[string]*orreryv1.Task{}
	var edges []layout.Edge
	for i, t := range tasks {
		nodes[i] = layout.Node{ID: t.GetStep(), Label: t.GetStep()}
		byStep[t.GetStep()] = t
		for _, p := range t.GetNeeds() {
			edges = append(edges, layout.Edge{From: p, To: t.GetStep()})
		}
	}
	opt := layout.Options{MaxPerLayer: maxDrawnPerLayer}
	if all {
		opt.MaxPerLayer = 0
	}
	res := layout.Layered(nodes, edges, opt)
	g := graph{Width: res.Width, Height: res.Height, Edges: res.Edges}
	for _, n := range res.Hidden {
		g.Hidden += n
	}
	for _, p := range res.Nodes {
		t := byStep[p.ID]
		label := p.Label
		if len(label) > 22 {
			label = label[:21] + "…"
		}
		n := graphNode{ID: t.GetId(), Step: t.GetStep(), Status: t.GetStatus(), X: p.X, Y: p.Y, W: p.W, H: p.H,
			Href: "/runs/" + runID + "?task=" + t.GetId() + "#attempts", Label: label, Title: t.GetStep() + ": " + t.GetStatus()}
		if c := t.GetItems(); c != nil { // a fan-out: one node for its items
			n.Label = fmt.Sprintf("%s ×%d", label, c.GetTotal())
			n.Title += fmt.Sprintf("; %d items: %s", c.GetTotal(), itemCounts(c))
			n.Href = "/runs/" + runID + "?items=" + url.QueryEscape(t.GetStep()) + "#items"
		}
		if c := t.GetChildRunId(); c != "" { // a step that runs a job: its node opens the child run
			n.Label += " ↗"
			n.Title += "; runs a job: child run " + c
			n.Href = "/runs/" + c
		}
		g.Nodes = append(g.Nodes, n)
	}
	return g
}

// snapshot is a run's state as the live page needs it.
type snapshot struct {
	Run      string            `json:"run"`
	Finished bool              `json:"finished"`
	Tasks    map[string]string `json:"tasks"` // task id -> status
}

// runStatus is the polling fallback of the live page: the run's state as
// JSON.
func (s *Server) runStatus(w http.ResponseWriter, r *http.Request, v *view) error {
	res, err := s.getRun(r, v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	return json.NewEncoder(w).Encode(snapshotOf(res))
}

func snapshotOf(m *orreryv1.GetRunResponse) snapshot {
	sn := snapshot{Run: m.GetRun().GetStatus(), Finished: m.GetRun().GetFinishTime() != nil, Tasks: make(map[string]string, len(m.GetTasks()))}
	for _, t := range m.GetTasks() {
		sn.Tasks[t.GetId()] = t.GetStatus()
	}
	return sn
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, v *view) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	if _, err := s.clients.runs.CancelRun(v.ctx, connect.NewRequest(&orreryv1.CancelRunRequest{Id: id, Reason: "cancelled in the web UI"})); err != nil {
		return err
	}
	return seeOther(w, r, "/runs/"+id, "Cancelled the run.")
}

// decideStep approves or rejects a step that asks for an approval (the
// form's decision), with the form's comment.
func (s *Server) decideStep(w http.ResponseWriter, r *http.Request, v *view) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	step, comment := r.PathValue("step"), r.PostFormValue("comment")
	var t *orreryv1.Task
	switch r.PostFormValue("decision") {
	case "approve":
		res, err := s.clients.runs.ApproveStep(v.ctx, connect.NewRequest(&orreryv1.ApproveStepRequest{Id: id, Step: step, Comment: comment}))
		if err != nil {
			return err
		}
		t = res.Msg.GetTask()
	case "reject":
		res, err := s.clients.runs.RejectStep(v.ctx, connect.NewRequest(&orreryv1.RejectStepRequest{Id: id, Step: step, Comment: comment}))
		if err != nil {
			return err
		}
		t = res.Msg.GetTask()
	default:
		return errNotFound
	}
	flash := fmt.Sprintf("Recorded: step %s is %s.", t.GetStep(), t.GetStatus())
	if t.GetApproval() != nil {
		flash = fmt.Sprintf("Recorded: step %s still waits (%s).", t.GetStep(), t.GetWaitReason())
	}
	return seeOther(w, r, "/runs/"+id+"?task="+t.GetId()+"#attempts", flash)
}

// retryRun runs a failed or cancelled run again from where it failed.
func (s *Server) retryRun(w http.ResponseWriter, r *http.Request, v *view) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	if _, err := s.clients.runs.RetryRun(v.ctx, connect.NewRequest(&orreryv1.RetryRunRequest{Id: id})); err != nil {
		return err
	}
	return seeOther(w, r, "/runs/"+id, "Retrying the run from its failed steps.")
}

// retryTask replays a dead-lettered task of the run.
func (s *Server) retryTask(w http.ResponseWriter, r *http.Request, v *view) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	task, err := uuid.Parse(r.PathValue("task"))
	if err != nil {
		return errNotFound
	}
	res, err := s.clients.runs.ReplayDeadLetters(v.ctx, connect.NewRequest(&orreryv1.ReplayDeadLettersRequest{TaskIds: []string{task.String()}}))
	if err != nil {
		return err
	}
	flash := "Retried the task."
	if len(res.Msg.GetTaskIds()) == 0 {
		flash = "Nothing to retry: the task is not dead-lettered."
	}
	return seeOther(w, r, "/runs/"+id+"?task="+task.String()+"#attempts", flash)
}

// coord formats a coordinate for the SVG (one decimal at most).
func coord(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(strconv.FormatFloat(f, 'f', 1, 64), "0"), ".")
}

// eventView is what the run page shows of run.event: its id, type, time
// and data (as JSON, cut at 2,000 bytes); nil for a run no event started.
func eventView(e map[string]any) map[string]any {
	if len(e) == 0 {
		return nil
	}
	data, _ := json.Marshal(e["data"])
	s := string(data)
	if len(s) > 2000 {
		s = strings.ToValidUTF8(s[:2000], "") + "…"
	}
	return map[string]any{"id": e["id"], "type": e["type"], "source": e["source"], "time": e["time"], "data": s}
}
