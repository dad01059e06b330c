package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/store"
)

// Approvals (docs/parked-steps.md, "approval"): a step that asks for an
// approval parks as a sleep does, its timeout its wake_at; people end it
// with decisions (Decide), each a row of step_decisions under the
// attempt's fencing token. Count approvals from distinct principals end
// it succeeded, one rejection fails it, both through Finish as a worker's
// report would, in the transaction that records the decision.

// MaxComment bounds a decision's comment.
const MaxComment = 1024

// A Decision is a principal's approval or rejection of a run's step.
type Decision struct {
	Run     uuid.UUID
	Step    string
	Approve bool
	Comment string
}

// The decisions, as step_decisions and the audit log name them.
const (
	decisionApprove = "approve"
	decisionReject  = "reject"
)

// ErrNotAwaitingApproval: the step does not wait for an approval now (it
// is not such a step, or it is not parked: not yet released, or ended).
var ErrNotAwaitingApproval = errors.New("the step is not waiting for an approval")

// ErrNoStep: the run has no step of the name.
var ErrNoStep = errors.New("step not found")

// ErrDecidedAlready: the principal decided on the step's attempt already.
var ErrDecidedAlready = errors.New("decided on this step already")

// A DeniedError is a decision its principal may not make: Field names
// what of the approval refuses them.
type DeniedError struct {
	Field, Message string
}

func (e *DeniedError) Error() string { return e.Field + ": " + e.Message }

// Decide records a's decision on a step that waits for an approval, and
// ends the step when it is decided: a rejection fails it, the count's
// approval succeeds it (its output the decision: who, when, comment). It
// is audited with its comment. It returns the step's task as it is after
// the decision. a must hold the approval's role on the run's job (Holds),
// be one of its principals when it names any, and, when it is separate,
// not be who triggered the run; a principal decides once on an attempt.
func (s *Service) Decide(ctx context.Context, a job.Actor, d Decision) (*Task, error) {
	switch {
	case d.Step == "" || len(d.Step) > 200 || !dag.IsText(d.Step):
		return nil, &dag.FieldError{Field: "step", Message: "name the step that asks for an approval"}
	case len(d.Comment) > MaxComment:
		return nil, &dag.FieldError{Field: "comment", Message: fmt.Sprintf("is %d bytes; the limit is %d", len(d.Comment), MaxComment)}
	case !dag.IsText(d.Comment) || strings.IndexFunc(d.Comment, unicode.IsControl) >= 0:
		return nil, &dag.FieldError{Field: "comment", Message: "is not one line of text (a control character, a NUL or invalid UTF-8)"}
	}
	// Who may decide is the run's approval's (its job version, pinned, and
	// who triggered the run do not change): asked before the run's lock,
	// so that a caller who may not decide takes no lock.
	r, err := store.New(s.pool).GetRun(ctx, store.GetRunParams{TenantID: a.Tenant, ID: d.Run})
	if store.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, d.Run)
	}
	if err != nil {
		return nil, err
	}
	spec, err := specs.get(ctx, s.pool, r.JobID, r.JobVersion)
	if err != nil {
		return nil, err
	}
	i := spec.stepIndex(d.Step)
	switch {
	case i < 0:
		return nil, fmt.Errorf("%w: the run has no step %.100q", ErrNoStep, d.Step)
	case spec.Steps[i].Approval == nil:
		return nil, fmt.Errorf("%w: step %q does not ask for one", ErrNotAwaitingApproval, d.Step)
	}
	ask := spec.Steps[i].Approval
	if err := mayDecide(a, r, ask); err != nil {
		return nil, err
	}
	err = store.InRawTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := store.New(tx).LockRun(ctx, d.Run); err != nil {
			return err
		}
		return s.applier().in(tx).decide(ctx, a, r, ask, d)
	})
	if err != nil {
		return nil, err
	}
	got, err := s.Get(ctx, a, d.Run, ItemsPage{})
	if err != nil {
		return nil, err
	}
	for i := range got.Tasks {
		if got.Tasks[i].Step == d.Step {
			return &got.Tasks[i], nil
		}
	}
	return nil, fmt.Errorf("%w: the run has no step %.100q", ErrNoStep, d.Step)
}

// decide is Decide in its transaction, the run r locked, a allowed to
// decide on the approval ask: the step must be parked on it now, its
// timeout not passed.
func (ap *applying) decide(ctx context.Context, a job.Actor, r store.GetRunRow, ask *dag.Approval, d Decision) error {
	p, err := ap.q.ParkedStep(ctx, store.ParkedStepParams{RunID: d.Run, Step: d.Step})
	if store.IsNotFound(err) {
		return fmt.Errorf("%w: the run has no step %.100q", ErrNoStep, d.Step)
	}
	if err != nil {
		return err
	}
	if p.Kind == nil || *p.Kind != "approval" {
		return fmt.Errorf("%w: step %q is %s", ErrNotAwaitingApproval, d.Step, p.Status)
	}
	if p.Due { // (its timeout's end is on its way)
		return fmt.Errorf("%w: its timeout passed at %s", ErrNotAwaitingApproval, p.WakeAt.UTC().Format(time.RFC3339))
	}
	decision := decisionReject
	if d.Approve {
		decision = decisionApprove
	}
	rows, err := ap.q.InsertDecision(ctx, store.InsertDecisionParams{TaskID: p.TaskID, FencingToken: p.FencingToken,
		Principal: a.Principal, TenantID: a.Tenant, Decision: decision, Comment: d.Comment})
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("%w: %s decided on step %q of this run already", ErrDecidedAlready, a.Principal, d.Step)
	}
	decisions, err := ap.q.DecisionsOf(ctx, store.DecisionsOfParams{TaskIds: []uuid.UUID{p.TaskID}, Tokens: []int64{p.FencingToken}})
	if err != nil {
		return err
	}
	res, decided := decisionResult(ask, decisions)
	after, _ := json.Marshal(map[string]any{"step": d.Step, "decision": decision, "comment": d.Comment, "attempt": p.Attempt, "decided": decided})
	if err := ap.q.InsertRunAudit(ctx, store.InsertRunAuditParams{
		ID: uuid.Must(uuid.NewV7()), TenantID: a.Tenant, Actor: a.Name, Action: decision, TargetKind: "run",
		TargetID: d.Run, TargetName: r.Namespace + "/" + r.JobName, After: after,
	}); err != nil {
		return err
	}
	if !decided {
		return nil
	}
	locked, err := ap.q.LockParked(ctx, store.LockParkedParams{TaskIds: []uuid.UUID{p.TaskID}, Tokens: []int64{p.FencingToken}})
	if err != nil {
		return err
	}
	if len(locked) != 1 {
		return fmt.Errorf("%w: step %q ended meanwhile", ErrNotAwaitingApproval, d.Step)
	}
	return ap.endParked(ctx, []Report{{TaskID: p.TaskID, RunID: d.Run, FencingToken: p.FencingToken, Result: res}})
}

// mayDecide says why a may not decide on the approval ask of run r, or
// nil: a names a principal, holds the approval's role on the run's job,
// is among its principals when it names any, and, when it is separate,
// is not who is behind the run (r.TriggeredBy: who triggered it, or its
// tree's root, started its backfill or published its event).
func mayDecide(a job.Actor, r store.GetRunRow, ask *dag.Approval) error {
	role := ask.DecidedBy()
	switch {
	case a.Principal == "":
		return &DeniedError{"approval", "the caller names no principal"}
	case a.Holds != nil && !a.Holds(r.Namespace, r.JobName, role):
		return &DeniedError{"approval.role", fmt.Sprintf("deciding needs the role %s on job %s/%s; %s does not hold it", role, r.Namespace, r.JobName, a.Principal)}
	case len(ask.Principals) > 0 && !slices.Contains(ask.Principals, a.Principal):
		return &DeniedError{"approval.principals", fmt.Sprintf("%s is not among the principals who may decide", a.Principal)}
	case ask.Separate && r.TriggeredBy == a.Principal:
		return &DeniedError{"approval.separate", fmt.Sprintf("%s is behind this run (triggered it, or the run it came from, or its backfill or event) and may not decide on it", a.Principal)}
	}
	return nil
}

// A decided is one decision as a step's output names it.
type decided struct {
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Comment string    `json:"comment"`
}

// decisionResult is the end the decisions so far (the first first) make
// of the approval ask, and whether they end it: a rejection fails it; the
// count's approval succeeds it. Its output is the decision ("approved" or
// "rejected"), who made the deciding one, when and with what comment, and
// every approval.
func decisionResult(ask *dag.Approval, decisions []store.DecisionsOfRow) (executor.Result, bool) {
	out := struct {
		Decision  string    `json:"decision"`
		By        string    `json:"by"`
		At        time.Time `json:"at"`
		Comment   string    `json:"comment"`
		Approvals []decided `json:"approvals"`
	}{Approvals: []decided{}}
	for _, d := range decisions {
		one := decided{d.Principal, d.DecidedAt.UTC(), d.Comment}
		out.By, out.At, out.Comment = one.By, one.At, one.Comment
		if d.Decision == decisionReject {
			out.Decision = "rejected"
			b, _ := json.Marshal(out)
			why := "rejected by " + d.Principal
			if d.Comment != "" {
				why += ": " + d.Comment
			}
			return executor.Result{ExitReason: ReasonRejected, FailureClass: executor.ClassUser, Error: why, Output: string(b)}, true
		}
		out.Approvals = append(out.Approvals, one)
	}
	if len(out.Approvals) < ask.Approvers() {
		return executor.Result{}, false
	}
	out.Decision = "approved"
	b, _ := json.Marshal(out)
	return executor.Result{OK: true, Output: string(b)}, true
}

// ReasonRejected is the exit reason of an approval's attempt that a
// rejection ended.
const ReasonRejected = "rejected"

// PendingApproval is a parked approval as the run views show it: what it
// asks, of whom, until when, and the decisions so far on its attempt.
type PendingApproval struct {
	Message     string
	Ask         dag.Approval
	TimeoutAt   time.Time
	Decisions   []store.DecisionsOfRow
	TriggeredBy string
}

// fillApprovals says what each parked approval of d asks and the
// decisions so far (Task.Approval), and its wait reason ("approval by
// editor 1/2 until T").
func fillApprovals(ctx context.Context, q *store.Queries, db store.DBTX, d *Detail) error {
	var ids []uuid.UUID
	var tokens []int64
	for _, t := range d.Tasks {
		if p := t.parked; p != nil && p.Kind == "approval" {
			ids, tokens = append(ids, t.ID), append(tokens, p.FencingToken)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	spec, err := specs.get(ctx, db, d.JobID, d.JobVersion)
	if err != nil {
		return err
	}
	rows, err := q.DecisionsOf(ctx, store.DecisionsOfParams{TaskIds: ids, Tokens: tokens})
	if err != nil {
		return err
	}
	for i := range d.Tasks {
		t := &d.Tasks[i]
		j := spec.stepIndex(t.Step)
		if t.parked == nil || t.parked.Kind != "approval" || j < 0 || spec.Steps[j].Approval == nil {
			continue
		}
		pa := &PendingApproval{Ask: *spec.Steps[j].Approval, TriggeredBy: d.TriggeredBy}
		if t.parked.Message != nil {
			pa.Message = *t.parked.Message
		}
		if t.parked.WakeAt != nil {
			pa.TimeoutAt = t.parked.WakeAt.UTC()
		}
		approvals := 0
		for _, r := range rows {
			if r.TaskID == t.ID {
				pa.Decisions = append(pa.Decisions, r)
				if r.Decision == decisionApprove {
					approvals++
				}
			}
		}
		t.Approval = pa
		t.WaitReason = fmt.Sprintf("approval by %s %d/%d until %s", pa.Ask.DecidedBy(), approvals, pa.Ask.Approvers(), pa.TimeoutAt.Format(time.RFC3339))
	}
	return nil
}
