package main

import (
	"fmt"
	"slices"
	"strings"
)

// summaries are the operations' titles, by operationId: what a reference
// lists and a client names its methods after. The protos' comments become
// the descriptions. Every operation has one, and every one names an
// operation (upgrade fails otherwise).
var summaries = map[string]string{
	"AccessService_CreateAPIKey":      "Create an API key",
	"AccessService_CreateTenant":      "Create a tenant",
	"AccessService_GetTenantQuota":    "Get a tenant's quota and usage",
	"AccessService_GrantRole":         "Grant a role on a namespace or a job",
	"AccessService_ListAPIKeys":       "List the tenant's API keys",
	"AccessService_ListGrants":        "List role grants",
	"AccessService_ListTenants":       "List tenants",
	"AccessService_RevokeAPIKey":      "Revoke an API key",
	"AccessService_RevokeGrant":       "Revoke a role grant",
	"AccessService_SetTenantQuota":    "Set a tenant's quota",
	"AccessService_WhoAmI":            "Show the caller's principal, tenant and roles",
	"AlertService_ListAlerts":         "List alerts",
	"AlertService_ListNotifications":  "List webhook notifications",
	"AuditService_ListAudit":          "List audit entries",
	"ClusterService_GetCluster":       "Show nodes, shards and workers",
	"EventService_Publish":            "Publish an event",
	"JobService_Backfill":             "Backfill a job over a time range",
	"JobService_BackfillByName":       "Backfill a job over a time range, by name",
	"JobService_CancelBackfill":       "Cancel a backfill",
	"JobService_CancelBackfillByName": "Cancel a backfill, job by name",
	"JobService_CreateJob":            "Create a job",
	"JobService_DeleteJob":            "Delete a job",
	"JobService_DeleteJobByName":      "Delete a job by name",
	"JobService_GetJob":               "Get a job",
	"JobService_GetJobByName":         "Get a job by name",
	"JobService_ListBackfills":        "List a job's backfills",
	"JobService_ListBackfillsByName":  "List a job's backfills, by name",
	"JobService_ListJobs":             "List jobs",
	"JobService_ListJobsInNamespace":  "List the jobs of a namespace",
	"JobService_PauseJob":             "Pause a job",
	"JobService_PauseJobByName":       "Pause a job by name",
	"JobService_PreviewSchedule":      "Preview a schedule's fire times",
	"JobService_ResumeJob":            "Resume a job",
	"JobService_ResumeJobByName":      "Resume a job by name",
	"JobService_UpdateJob":            "Update a job (the fields given)",
	"JobService_UpdateJobByName":      "Update a job by name (the fields given)",
	"JobService_UpdateJobByNamePut":   "Replace a job by name",
	"JobService_UpdateJobPut":         "Replace a job",
	"PipelineService_Apply":           "Apply a folder of jobs",
	"PipelineService_Forecast":        "Forecast the runs of a time window",
	"PipelineService_Plan":            "Plan what applying a folder of jobs changes",
	"ProfileService_DeleteProfile":    "Delete a resource profile",
	"ProfileService_GetProfile":       "Get a resource profile",
	"ProfileService_ListProfiles":     "List the tenant's resource profiles",
	"ProfileService_SetProfile":       "Create or replace a resource profile",
	"RunService_CancelRun":            "Cancel a run",
	"RunService_ApproveStep":          "Approve a step that asks for an approval",
	"RunService_RejectStep":           "Reject a step that asks for an approval",
	"SourceService_CreateSource":      "Create an event source (a signed webhook)",
	"SourceService_DeleteSource":      "Delete an event source",
	"SourceService_ListSources":       "List the tenant's event sources",
	"RunService_GetRun":               "Get a run with its steps and attempts",
	"RunService_ListDeadLetters":      "List dead letters",
	"RunService_ListRuns":             "List runs",
	"RunService_ListRunsOfJob":        "List a job's runs",
	"RunService_ListRunsOfJobByName":  "List a job's runs, by name",
	"RunService_ReplayDeadLetters":    "Replay dead letters",
	"RunService_RetryRun":             "Retry a run from its failed steps",
	"RunService_SummarizeRuns":        "Summarize runs hour by hour",
	"RunService_TriggerJob":           "Trigger a run of a job",
	"RunService_TriggerJobByName":     "Trigger a run of a job, by name",
	"RunService_TriggerJobRunNow":     "Trigger a run of a job (Airflow-style alias)",
	"WorkerService_Claim":             "Claim attempts to run (a long poll)",
	"WorkerService_Heartbeat":         "Renew the leases of running attempts",
	"WorkerService_Report":            "Report how an attempt ended",
}

// The error statuses an operation answers, by the rules of api/error.go
// and api/rest.go; the REST matrix and fuzz tests check every status they
// see against the operation's list.
var (
	// notFoundFromBody are the operations without a path parameter that
	// name something that may not exist (in the body or the query).
	notFoundFromBody = []string{
		"AccessService_RevokeGrant", "RunService_ReplayDeadLetters",
		"RunService_ListRuns", "RunService_ListDeadLetters", "AlertService_ListAlerts",
		"AlertService_ListNotifications", "AuditService_ListAudit",
	}
	// conflicting are the operations a resource's state or another
	// request can refuse with 409: it exists already, an expected version
	// that is not current, an idempotency key used for another request, a
	// deleted job, a run that cannot be retried, a backfill no longer
	// running.
	conflicting = []string{
		"JobService_CreateJob", "JobService_UpdateJob", "JobService_DeleteJob", "JobService_PauseJob",
		"JobService_ResumeJob", "JobService_Backfill", "JobService_CancelBackfill",
		"RunService_TriggerJob", "RunService_RetryRun", "RunService_CancelRun",
		"AccessService_CreateTenant", "AccessService_GrantRole", "PipelineService_Apply",
		"ProfileService_DeleteProfile", "SourceService_CreateSource",
		"RunService_ApproveStep", "RunService_RejectStep",
	}
	// anyKey are the operations every valid key may call.
	anyKey = []string{"AccessService_WhoAmI"}
)

// errorCodes are the error statuses of a REST operation (base is its
// method's operationId).
func errorCodes(base, path string, body, input bool) []int {
	codes := []int{400, 401}
	if !slices.Contains(anyKey, base) {
		codes = append(codes, 403)
	}
	if strings.Contains(path, "{") || slices.Contains(notFoundFromBody, base) {
		codes = append(codes, 404)
	}
	if slices.Contains(conflicting, base) {
		codes = append(codes, 409)
	}
	if body {
		codes = append(codes, 413, 415)
	}
	if input {
		codes = append(codes, 422)
	}
	return append(codes, 429, 503)
}

// workerErrorCodes are a WorkerService method's, as Connect maps its
// codes (an unknown attempt's report is not_found).
func workerErrorCodes(base string) []int {
	codes := []int{400, 401, 403}
	if base == "WorkerService_Report" {
		codes = append(codes, 404)
	}
	return append(codes, 415, 429, 503)
}

// errorResponse is an error status as components.responses describes it.
type errorResponse struct {
	code        int
	name        string
	description string
	retryAfter  bool
}

var errorResponses = []errorResponse{
	{400, "BadRequest", "The request could not be read: malformed JSON (the message gives the line and column), an unknown field or query parameter, a value of the wrong type, or a field the path gives.", false},
	{401, "Unauthorized", "No API key, or one that is not valid (unknown, revoked or expired).", false},
	{403, "Forbidden", "The key's role or tenant may not make this call: a reader changing a job, a worker key outside WorkerService, a tenant's admin managing tenants.", false},
	{404, "NotFound", "What the call names does not exist in the caller's tenant (another tenant's is not found either).", false},
	{409, "Conflict", "It exists already, the expected version is not the current one, the idempotency key was used for another request, or the resource's state refuses the call (a deleted job, a run that cannot be retried, a backfill no longer running).", false},
	{413, "PayloadTooLarge", "The body is past the server's limit.", false},
	{415, "UnsupportedMediaType", "A body that is not application/json, or a compressed one.", false},
	{422, "UnprocessableEntity", "A value that is not valid: the message names the field at fault (spec.schedule.cron: ...), one line per problem.", false},
	{429, "TooManyRequests", "Over a rate (Retry-After says when to retry) or over one of the tenant's quotas (no Retry-After: the quota or the usage must change first).", true},
	{503, "ServiceUnavailable", "The database is unavailable, or could not tell whether a change was made (read before retrying, or retry with the same idempotency key).", true},
}

// connectDescriptions are the statuses whose causes differ where Connect
// answers them (WorkerService) from REST's.
var connectDescriptions = map[int]string{
	400: "The request could not be read (malformed JSON, an unknown field), misses a field it needs, or claims a type or namespace outside the key's scope (invalid_argument).",
	403: "A key that is not a worker key (orrery keys create --role worker): WorkerService takes those only (permission_denied).",
	404: "The attempt is unknown, or its lease was taken over: its fencing token is not the current one (not_found).",
	415: "The body is neither application/json nor application/proto; Connect answers this with no body.",
	429: "Over a rate or a quota, or a body past the server's limit (resource_exhausted).",
	503: "The database is unavailable (unavailable): retry after Retry-After.",
}

func errorResponseOf(code int) errorResponse {
	for _, e := range errorResponses {
		if e.code == code {
			return e
		}
	}
	panic(fmt.Sprintf("no error response for %d", code))
}
