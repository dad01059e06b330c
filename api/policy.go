package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/run"
)

// A policy is what a procedure needs: a role on every target its request
// names. It is the one place that decides what a call may do; handlers
// never check. A principal's role on a target is the most permissive of
// its tenant-wide role and its grants there (access.Principal.RoleOn).
type policy struct {
	role access.Role
	// targets reads what the request acts on; nil: the whole tenant.
	targets func(msg any) []target
	// anywhere: any role in the tenant will do (a grant on one namespace
	// included); lists then show only what the principal may read.
	anywhere bool
	// system: only a system admin (tenant management).
	system bool
	// anyKey: every authenticated principal (role is None).
	anyKey bool
	// worker: a worker key only (WorkerService); the handler checks its
	// scope.
	worker bool
	// publisher: a publisher key too (besides role, tenant-wide).
	publisher bool
}

// A target is one thing a request names: a resource as it is, or an id
// that must be located first (a job, a run, tasks).
type target struct {
	res   access.Resource
	job   uuid.UUID
	run   uuid.UUID
	tasks []uuid.UUID
	// anywhere: any role in the tenant will do.
	anywhere bool
}

func on(r access.Resource) target { return target{res: r} }

// onNamespace is a namespace as jobs name it ("" is the default one).
func onNamespace(ns string) target { return on(access.Resource{Namespace: orDefault(ns)}) }

func onJob(ns, name string) target { return on(access.Resource{Namespace: orDefault(ns), Job: name}) }

func orDefault(ns string) string {
	if ns == "" {
		return dag.DefaultNamespace
	}
	return ns
}

// onRef is the job a JobRef names, read as refFromProto reads it: by id
// when one is given. A ref that does not parse names nothing (the handler
// refuses it).
func onRef(r *orreryv1.JobRef) []target {
	ref, err := refFromProto("ref", r)
	switch {
	case err != nil:
		return nil
	case r.GetId() != "":
		return []target{{job: ref.ID}}
	}
	return []target{onJob(ref.Namespace, ref.Name)}
}

// onFilter is a list's optional job filter: nothing to check without one
// (the list shows only what the principal may read), else the job.
func onFilter(r *orreryv1.JobRef) []target {
	if r == nil {
		return []target{{anywhere: true}}
	}
	return onRef(r)
}

// onOptionalRef is onRef, or the whole tenant without a ref.
func onOptionalRef(r *orreryv1.JobRef) []target {
	if r == nil {
		return []target{on(access.TenantWide)}
	}
	return onRef(r)
}

func onRun(id string) []target {
	if u, err := uuid.Parse(id); err == nil {
		return []target{{run: u}}
	}
	return nil
}

// planTargets are the jobs of a plan and, with prune, the namespaces it
// may delete from (those named, else those of its jobs).
func planTargets(jobs []*orreryv1.AppliedJob, prune bool, namespaces []string) []target {
	var ts []target
	seen := map[string]bool{}
	for _, j := range jobs {
		md := j.GetMetadata()
		ts = append(ts, onJob(md.GetNamespace(), md.GetName()))
		if len(namespaces) == 0 && !seen[orDefault(md.GetNamespace())] {
			seen[orDefault(md.GetNamespace())] = true
			if prune {
				ts = append(ts, onNamespace(md.GetNamespace()))
			}
		}
	}
	if prune {
		for _, ns := range namespaces {
			ts = append(ts, onNamespace(ns))
		}
	}
	return ts
}

// grantTarget is what a grant names: its namespace or job; without a
// namespace, the whole tenant (the handler refuses it).
func grantTarget(ns, name string) []target {
	if ns == "" {
		return []target{on(access.TenantWide)}
	}
	return []target{on(access.Resource{Namespace: ns, Job: name})}
}

var (
	tenantAdmin = policy{role: access.Admin}
	systemAdmin = policy{role: access.Admin, system: true}
	anyReader   = policy{role: access.Reader, anywhere: true}
	workerKey   = policy{role: access.Worker, worker: true}
	// publishers: a publisher key, or an editor of the whole tenant (an
	// event reaches every job of the tenant).
	publishers = policy{role: access.Editor, publisher: true}
)

var policies = map[string]policy{
	orreryv1connect.JobServiceCreateJobProcedure: {role: access.Editor, targets: func(m any) []target {
		md := m.(*orreryv1.CreateJobRequest).GetMetadata()
		return []target{onJob(md.GetNamespace(), md.GetName())}
	}},
	orreryv1connect.JobServiceGetJobProcedure: {role: access.Reader, targets: func(m any) []target {
		return onRef(m.(*orreryv1.GetJobRequest).GetRef())
	}},
	orreryv1connect.JobServiceUpdateJobProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRef(m.(*orreryv1.UpdateJobRequest).GetRef())
	}},
	orreryv1connect.JobServiceDeleteJobProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRef(m.(*orreryv1.DeleteJobRequest).GetRef())
	}},
	orreryv1connect.JobServicePauseJobProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRef(m.(*orreryv1.PauseJobRequest).GetRef())
	}},
	orreryv1connect.JobServiceResumeJobProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRef(m.(*orreryv1.ResumeJobRequest).GetRef())
	}},
	orreryv1connect.JobServiceBackfillProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRef(m.(*orreryv1.BackfillRequest).GetRef())
	}},
	orreryv1connect.JobServiceCancelBackfillProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRef(m.(*orreryv1.CancelBackfillRequest).GetRef())
	}},
	orreryv1connect.JobServiceListBackfillsProcedure: {role: access.Reader, targets: func(m any) []target {
		return onRef(m.(*orreryv1.ListBackfillsRequest).GetRef())
	}},
	// A forecast counts only the stored jobs the caller may read (and the
	// jobs it sends).
	orreryv1connect.PipelineServiceForecastProcedure:   anyReader,
	orreryv1connect.JobServiceListJobsProcedure:        anyReader,
	orreryv1connect.JobServicePreviewScheduleProcedure: anyReader,

	// Lists show only what the principal may read; a job filter needs a
	// role on the job, so the filter's lookup reveals nothing.
	orreryv1connect.RunServiceListRunsProcedure: {role: access.Reader, targets: func(m any) []target {
		return onFilter(m.(*orreryv1.ListRunsRequest).GetJob())
	}},
	orreryv1connect.RunServiceSummarizeRunsProcedure: anyReader,
	orreryv1connect.RunServiceListDeadLettersProcedure: {role: access.Reader, targets: func(m any) []target {
		return onFilter(m.(*orreryv1.ListDeadLettersRequest).GetJob())
	}},
	orreryv1connect.RunServiceGetRunProcedure: {role: access.Reader, targets: func(m any) []target {
		return onRun(m.(*orreryv1.GetRunRequest).GetId())
	}},
	orreryv1connect.RunServiceTriggerJobProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRef(m.(*orreryv1.TriggerJobRequest).GetJob())
	}},
	orreryv1connect.RunServiceCancelRunProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRun(m.(*orreryv1.CancelRunRequest).GetId())
	}},
	// A decision on an approval: whoever may read the run may ask; the
	// approval itself says who may decide (its role, principals and
	// separate: run.Service.Decide), as data of the step.
	orreryv1connect.RunServiceApproveStepProcedure: {role: access.Reader, targets: func(m any) []target {
		return onRun(m.(*orreryv1.ApproveStepRequest).GetId())
	}},
	orreryv1connect.RunServiceRejectStepProcedure: {role: access.Reader, targets: func(m any) []target {
		return onRun(m.(*orreryv1.RejectStepRequest).GetId())
	}},
	orreryv1connect.RunServiceRetryRunProcedure: {role: access.Editor, targets: func(m any) []target {
		return onRun(m.(*orreryv1.RetryRunRequest).GetId())
	}},
	// Replay by task ids needs admin on each task's job; by job, on the
	// job; with neither, it replays the whole tenant's dead letters.
	orreryv1connect.RunServiceReplayDeadLettersProcedure: {role: access.Admin, targets: func(m any) []target {
		r := m.(*orreryv1.ReplayDeadLettersRequest)
		if len(r.GetTaskIds()) == 0 {
			return onOptionalRef(r.GetJob())
		}
		var ids []uuid.UUID
		for _, s := range r.GetTaskIds() {
			if u, err := uuid.Parse(s); err == nil {
				ids = append(ids, u)
			}
		}
		return []target{{tasks: ids}}
	}},
	orreryv1connect.ClusterServiceGetClusterProcedure: anyReader,

	orreryv1connect.PipelineServicePlanProcedure: {role: access.Reader, targets: func(m any) []target {
		r := m.(*orreryv1.PlanRequest)
		return planTargets(r.GetJobs(), r.GetPrune(), r.GetNamespaces())
	}},
	orreryv1connect.PipelineServiceApplyProcedure: {role: access.Editor, targets: func(m any) []target {
		r := m.(*orreryv1.ApplyRequest)
		return planTargets(r.GetJobs(), r.GetPrune(), r.GetNamespaces())
	}},

	orreryv1connect.AuditServiceListAuditProcedure: tenantAdmin,

	orreryv1connect.AlertServiceListAlertsProcedure: {role: access.Reader, targets: func(m any) []target {
		return onFilter(m.(*orreryv1.ListAlertsRequest).GetJob())
	}},
	orreryv1connect.AlertServiceListNotificationsProcedure: {role: access.Reader, targets: func(m any) []target {
		return onFilter(m.(*orreryv1.ListNotificationsRequest).GetJob())
	}},

	// Profiles: an admin of the tenant changes them; any role reads them
	// (an editor names them in jobs).
	orreryv1connect.ProfileServiceSetProfileProcedure:    tenantAdmin,
	orreryv1connect.ProfileServiceDeleteProfileProcedure: tenantAdmin,
	orreryv1connect.ProfileServiceGetProfileProcedure:    anyReader,
	orreryv1connect.ProfileServiceListProfilesProcedure:  anyReader,

	orreryv1connect.AccessServiceCreateTenantProcedure:   systemAdmin,
	orreryv1connect.AccessServiceListTenantsProcedure:    systemAdmin,
	orreryv1connect.AccessServiceSetTenantQuotaProcedure: systemAdmin,
	// A named tenant's quota needs a system admin; the caller's own, an
	// admin of its tenant.
	orreryv1connect.AccessServiceGetTenantQuotaProcedure: {role: access.Admin, targets: func(m any) []target {
		if m.(*orreryv1.GetTenantQuotaRequest).GetTenant() != "" {
			return []target{on(access.System)}
		}
		return []target{on(access.TenantWide)}
	}},
	// A key in a tenant named by the request, or a system admin key, needs
	// a system admin; any other key, an admin of the tenant (any role,
	// none to admin, is within an admin's).
	orreryv1connect.AccessServiceCreateAPIKeyProcedure: {role: access.Admin, targets: func(m any) []target {
		r := m.(*orreryv1.CreateAPIKeyRequest)
		if r.GetTenant() != "" || r.GetSystemAdmin() {
			return []target{on(access.System)}
		}
		return []target{on(access.TenantWide)}
	}},
	orreryv1connect.AccessServiceListAPIKeysProcedure:  tenantAdmin,
	orreryv1connect.AccessServiceRevokeAPIKeyProcedure: tenantAdmin,
	orreryv1connect.AccessServiceGrantRoleProcedure: {role: access.Admin, targets: func(m any) []target {
		r := m.(*orreryv1.GrantRoleRequest)
		return grantTarget(r.GetNamespace(), r.GetJob())
	}},
	orreryv1connect.AccessServiceRevokeGrantProcedure: {role: access.Admin, targets: func(m any) []target {
		r := m.(*orreryv1.RevokeGrantRequest)
		return grantTarget(r.GetNamespace(), r.GetJob())
	}},
	orreryv1connect.AccessServiceListGrantsProcedure: {role: access.Admin, targets: func(m any) []target {
		return grantTarget(m.(*orreryv1.ListGrantsRequest).GetNamespace(), "")
	}},
	orreryv1connect.AccessServiceWhoAmIProcedure: {role: access.None, anyKey: true},

	orreryv1connect.EventServicePublishProcedure: publishers,
	// Sources: an admin of the tenant defines them (a source takes events
	// into every job of the tenant); any role lists them.
	orreryv1connect.SourceServiceCreateSourceProcedure: tenantAdmin,
	orreryv1connect.SourceServiceDeleteSourceProcedure: tenantAdmin,
	orreryv1connect.SourceServiceListSourcesProcedure:  anyReader,

	orreryv1connect.WorkerServiceClaimProcedure:     workerKey,
	orreryv1connect.WorkerServiceHeartbeatProcedure: workerKey,
	orreryv1connect.WorkerServiceReportProcedure:    workerKey,
}

// policyOf is a procedure's policy; a procedure missing from the table
// needs an admin of the tenant.
func policyOf(procedure string) policy {
	if p, ok := policies[procedure]; ok {
		return p
	}
	return tenantAdmin
}

// RequiredRole is the tenant-wide role a procedure needs (admin when not
// listed; none when any valid key will do), and whether it needs a system
// admin whatever the request says.
func RequiredRole(procedure string) (role access.Role, system bool) {
	p := policyOf(procedure)
	return p.role, p.system
}

// locator names the job an id points at in a tenant (access.Service).
type locator interface {
	LocateJob(ctx context.Context, tenant, id uuid.UUID) (access.Resource, bool, error)
	LocateRun(ctx context.Context, tenant, id uuid.UUID) (access.Resource, bool, error)
	LocateTasks(ctx context.Context, tenant uuid.UUID, ids []uuid.UUID) ([]access.Resource, error)
}

// check returns nil when p may make the call, else PermissionDenied (or
// the error of locating an id). An id that names nothing in p's tenant
// passes: the handler finds nothing either and answers NotFound, as it
// does for another tenant's id, so existence never leaks across tenants.
// A tenant-wide role that suffices decides without locating anything.
func (pol policy) check(ctx context.Context, loc locator, p access.Principal, msg any) error {
	switch {
	case pol.anyKey:
		return nil
	case pol.worker && p.Worker == nil:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is not a worker key; WorkerService needs one (orrery keys create --role worker --type TYPE)", p.Name))
	case pol.worker:
		return nil
	case pol.publisher && p.Role == access.Publisher:
		return nil
	case pol.system && !p.SystemAdmin:
		return denied(p, pol.role, access.System)
	case pol.system:
		return nil
	case pol.anywhere && !p.HasAnyRole():
		return denied(p, pol.role, access.TenantWide)
	case pol.anywhere:
		return nil
	}
	// A request that names nothing the policy can read (a missing or
	// malformed ref) needs the role tenant-wide: the handler refuses it.
	ts := []target{on(access.TenantWide)}
	if pol.targets != nil {
		if named := pol.targets(msg); len(named) > 0 {
			ts = named
		}
	}
	for _, t := range ts {
		switch {
		case t.anywhere && p.HasAnyRole():
			continue
		case t.anywhere:
			return denied(p, pol.role, access.TenantWide)
		case !t.res.System && p.Role.Allows(pol.role):
			continue
		}
		rs, err := t.locate(ctx, loc, p)
		if err != nil {
			return toConnect(ctx, nil, err)
		}
		for _, r := range rs {
			role := p.RoleOn(r)
			switch {
			case role.Allows(pol.role):
				continue
			case !role.Allows(access.Reader) && t.job != uuid.Nil:
				// An id the principal may not read is answered as the
				// handler answers an id that names nothing: no name, no
				// existence.
				return toConnect(ctx, nil, fmt.Errorf("%w: %s", job.ErrNotFound, job.Ref{ID: t.job}))
			case !role.Allows(access.Reader) && t.run != uuid.Nil:
				return toConnect(ctx, nil, fmt.Errorf("%w: %s", run.ErrNotFound, t.run))
			case t.tasks != nil:
				return connect.NewError(connect.CodePermissionDenied,
					fmt.Errorf("%s cannot do this to every one of these tasks; it needs %s on their jobs", p.Name, pol.role))
			}
			return denied(p, pol.role, r)
		}
	}
	return nil
}

// locate turns a target into the resources it names in p's tenant.
func (t target) locate(ctx context.Context, loc locator, p access.Principal) ([]access.Resource, error) {
	switch {
	case t.job != uuid.Nil:
		r, ok, err := loc.LocateJob(ctx, p.Tenant, t.job)
		return found(r, ok, err)
	case t.run != uuid.Nil:
		r, ok, err := loc.LocateRun(ctx, p.Tenant, t.run)
		return found(r, ok, err)
	case t.tasks != nil:
		return loc.LocateTasks(ctx, p.Tenant, t.tasks)
	}
	return []access.Resource{t.res}, nil
}

func found(r access.Resource, ok bool, err error) ([]access.Resource, error) {
	if !ok || err != nil {
		return nil, err
	}
	return []access.Resource{r}, nil
}

func denied(p access.Principal, need access.Role, r access.Resource) error {
	var what string
	switch {
	case r.System:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is not a system admin; managing tenants needs one", p.Name))
	case r.Namespace == "":
		what = "the whole tenant"
	case r.Job == "":
		what = "namespace " + r.Namespace
	default:
		what = "job " + r.Namespace + "/" + r.Job
	}
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("%s holds %s on %s; this needs %s", p.Name, p.RoleOn(r), what, need))
}
