package main

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/orrery-dev/orrery/api/gen/orrery/v1" // the descriptors of the schemas' messages
)

// needed are the request fields the server always needs, by schema: a
// request without one is refused (422, or 400 for a worker's). The
// protos cannot say it (proto3 has no required fields).
var needed = map[string][]string{
	"AppliedJob":             {"metadata", "spec"},
	"BackfillBody":           {"from", "to"},
	"ClaimRequest":           {"worker", "types"},
	"CreateAPIKeyRequest":    {"principal", "role"},
	"CreateJobRequest":       {"metadata", "spec"},
	"CreateTenantRequest":    {"name"},
	"PublishRequest":         {"type", "id"},
	"ForecastRequest":        {"from", "to"},
	"GrantRoleRequest":       {"principal", "namespace", "role"},
	"HeartbeatRequest":       {"worker"},
	"HeldAttempt":            {"taskId", "fencingToken"},
	"JobMetadata":            {"name"},
	"PreviewScheduleRequest": {"schedule"},
	"ReportRequest":          {"worker", "taskId", "fencingToken"},
	"RevokeGrantRequest":     {"principal", "namespace"},
	"SetProfileBody":         {"resources"},
	"CreateSourceRequest":    {"name", "kind", "secret"},
}

// someOf are the request bodies the server refuses empty (nothing to
// change), though no one field is needed: minProperties 1.
var someOf = []string{"SetTenantQuotaBody"}

// alwaysSet are the message fields of answers that the server always sets
// (a REST answer writes every other field, zero or not, but leaves out a
// message that is not set).
var alwaysSet = map[string][]string{
	"AuditEntry":             {"time"},
	"CancelBackfillResponse": {"backfill"},
	"CancelRunResponse":      {"run"},
	"CreateAPIKeyResponse":   {"key"},
	"CreateJobResponse":      {"job"},
	"CreateTenantResponse":   {"tenant"},
	"PublishResponse":        {"eventId", "receiveTime"},
	"DeleteJobResponse":      {"job"},
	"GetJobResponse":         {"job"},
	"GetRunResponse":         {"run"},
	"GetTenantQuotaResponse": {"quota"},
	"GrantRoleResponse":      {"grant"},
	"Job":                    {"metadata", "spec", "createTime", "updateTime"},
	"JobBackfill":            {"from", "to", "createTime"},
	"PauseJobResponse":       {"job"},
	"ResumeJobResponse":      {"job"},
	"RetryRunResponse":       {"run"},
	"Run":                    {"scheduledTime"},
	"SetTenantQuotaResponse": {"quota"},
	"SetProfileResponse":     {"profile"},
	"GetProfileResponse":     {"profile"},
	"DeleteProfileResponse":  {"profile"},
	"ResourceProfile":        {"resources", "createTime", "updateTime"},
	"CreateSourceResponse":   {"source"},
	"DeleteSourceResponse":   {"source"},
	"EventSource":            {"name", "namespace", "kind", "secret", "hookPath", "createTime"},
	"TriggerJobResponse":     {"run"},
	"UpdateJobResponse":      {"job"},
}

// connectSet are the fields of WorkerService's answers that are always
// there: Connect's JSON leaves out empty fields (an empty claim is {}, a
// stale report's accepted false is {}), so only what is never empty.
var connectSet = map[string][]string{
	"RemoteTask": {"attemptId", "taskId", "fencingToken", "leaseExpiresAt", "deadline", "runId", "namespace",
		"job", "step", "attempt", "scheduledFor", "trigger", "type", "paramsJson", "idempotencyKey"},
	"StopAttempt": {"taskId", "reason"},
}

// schemas finishes components.schemas: free-form values typed, the error
// schemas, required fields, and no schema that nothing uses.
func schemas(root *yaml.Node) error {
	comps := get(root, "components")
	all := get(comps, "schemas")
	if v := get(all, "GoogleProtobufValue"); v != nil {
		set(v, "type", strs("null", "boolean", "number", "string", "array", "object"))
		set(v, "items", mapping()) // any values: a reference to itself is a type generators cannot name
		set(v, "additionalProperties", mapping())
		set(v, "description", str("Any JSON value."))
	}
	set(all, "Status", mapping(
		"type", str("object"),
		"description", str(`An error, as REST answers it: {"code": 3, "message": "spec.schedule.cron: ...", "details": []}.`),
		"required", strs("code", "message", "details"),
		"properties", mapping(
			"code", mapping("type", str("integer"), "format", str("int32"),
				"description", str("The gRPC status code (google.rpc.Code): 3 invalid argument, 5 not found, 6 already exists, 7 permission denied, 8 resource exhausted, 9 failed precondition, 10 aborted, 14 unavailable, 16 unauthenticated.")),
			"message", mapping("type", str("string"),
				"description", str("What went wrong, naming the field at fault as the request wrote it; one line per problem.")),
			"details", mapping("type", str("array"), "items", ref("GoogleProtobufAny"),
				"description", str("Empty: the message says it all."))),
	))
	set(all, "ConnectError", mapping(
		"type", str("object"),
		"description", str(`An error, as Connect answers it (WorkerService): {"code": "not_found", "message": "..."}.`),
		"required", strs("code"),
		"properties", mapping(
			"code", mapping("type", str("string"), "enum", strs("canceled", "unknown", "invalid_argument", "deadline_exceeded",
				"not_found", "already_exists", "permission_denied", "resource_exhausted", "failed_precondition", "aborted",
				"out_of_range", "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated")),
			"message", mapping("type", str("string"), "description", str("What went wrong, naming the field at fault."))),
	))

	walk(comps, func(n *yaml.Node) {
		if d := get(n, "description"); n.Kind == yaml.MappingNode && d != nil && d.Kind == yaml.ScalarNode {
			d.Value = prose(d.Value)
		}
	})
	requests, answers, connectAnswers := reachable(root)
	for _, name := range keys(all) {
		s := get(all, name)
		if !requests[name] && !answers[name] && !connectAnswers[name] {
			continue // an error's schema (Status, ConnectError) says its own
		}
		var req []string
		switch {
		case requests[name]:
			req = needed[name]
		case connectAnswers[name]:
			req = connectSet[name]
		case answers[name]:
			var err error
			if req, err = answered(name, s); err != nil {
				return err
			}
		}
		if err := setRequired(name, s, req); err != nil {
			return err
		}
		if requests[name] && slices.Contains(someOf, name) {
			set(s, "minProperties", num(1))
		}
	}
	for _, name := range someOf {
		if !requests[name] {
			return fmt.Errorf("someOf names %s, which no request uses", name)
		}
	}
	for name := range needed {
		if !requests[name] {
			return fmt.Errorf("needed names %s, which no request uses", name)
		}
	}
	for name := range alwaysSet {
		if !answers[name] || requests[name] {
			return fmt.Errorf("alwaysSet names %s, which is not an answer's only", name)
		}
	}
	for name := range connectSet {
		if !connectAnswers[name] || requests[name] || answers[name] {
			return fmt.Errorf("connectSet names %s, which is not a WorkerService answer's only", name)
		}
	}
	prune(root)
	return nil
}

func setRequired(name string, s *yaml.Node, req []string) error {
	del(s, "required")
	if len(req) == 0 {
		return nil
	}
	props := get(s, "properties")
	for _, f := range req {
		if get(props, f) == nil {
			return fmt.Errorf("%s has no property %s to require", name, f)
		}
	}
	set(s, "required", strs(req...))
	return nil
}

// answered are the fields an answer's schema always holds: over REST
// every field that is not a message, optional or in a oneof (their zero
// values are written too), and the messages alwaysSet names.
func answered(name string, s *yaml.Node) ([]string, error) {
	props := get(s, "properties")
	if props == nil {
		return nil, nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("orrery.v1." + name))
	if err != nil {
		return nil, nil // a well-known type's schema (GoogleProtobufAny)
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a message", name)
	}
	for _, f := range alwaysSet[name] {
		if get(props, f) == nil {
			return nil, fmt.Errorf("alwaysSet: %s has no property %s", name, f)
		}
	}
	var out []string
	for _, p := range keys(props) {
		fd := md.Fields().ByJSONName(p)
		if fd == nil {
			return nil, fmt.Errorf("%s.%s: no such field", name, p)
		}
		if !fd.HasPresence() || slices.Contains(alwaysSet[name], p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// reachable says which schemas requests use (bodies), which REST answers
// do and which Connect's (WorkerService) do, each with the schemas theirs
// refer to.
func reachable(root *yaml.Node) (requests, answers, connectAnswers map[string]bool) {
	all := get(get(root, "components"), "schemas")
	requests, answers, connectAnswers = map[string]bool{}, map[string]bool{}, map[string]bool{}
	var mark func(n *yaml.Node, into map[string]bool)
	mark = func(n *yaml.Node, into map[string]bool) {
		walk(n, func(c *yaml.Node) {
			if r := get(c, "$ref"); c.Kind == yaml.MappingNode && r != nil {
				name, ok := strings.CutPrefix(r.Value, "#/components/schemas/")
				if ok && !into[name] {
					into[name] = true
					if s := get(all, name); s != nil {
						mark(s, into)
					}
				}
			}
		})
	}
	paths := get(root, "paths")
	for _, p := range keys(paths) {
		item := get(paths, p)
		for _, verb := range keys(item) {
			op := get(item, verb)
			if b := get(op, "requestBody"); b != nil {
				mark(b, requests)
			}
			into := answers
			if !strings.HasPrefix(p, "/api/") {
				into = connectAnswers
			}
			if r := get(op, "responses"); r != nil {
				for _, code := range keys(r) {
					if strings.HasPrefix(code, "2") {
						mark(get(r, code), into)
					}
				}
			}
		}
	}
	return requests, answers, connectAnswers
}

// prune drops the schemas nothing refers to (a request message whose
// fields a path and a body split).
func prune(root *yaml.Node) {
	comps := get(root, "components")
	all := get(comps, "schemas")
	for {
		used := map[string]bool{}
		walk(root, func(c *yaml.Node) {
			if r := get(c, "$ref"); c.Kind == yaml.MappingNode && r != nil {
				used[strings.TrimPrefix(r.Value, "#/components/schemas/")] = true
			}
		})
		removed := false
		for _, name := range keys(all) {
			if !used[name] {
				del(all, name)
				removed = true
			}
		}
		if !removed {
			return
		}
	}
}

// bodySchema is the schema of an operation's body: its request message's
// without the fields the path binds (the server refuses them in the body),
// named NAMEBody. It returns the schema's name.
func bodySchema(root *yaml.Node, request string, bound []string) (string, error) {
	all := get(get(root, "components"), "schemas")
	if len(bound) == 0 {
		return request, nil
	}
	name := strings.TrimSuffix(request, "Request") + "Body"
	if get(all, name) != nil {
		return name, nil
	}
	src := get(all, request)
	if src == nil {
		return "", fmt.Errorf("no schema %s", request)
	}
	s := clone(src)
	props := get(s, "properties")
	for _, f := range bound {
		if get(props, f) == nil {
			return "", fmt.Errorf("%s has no field %s, which a path binds", request, f)
		}
		del(props, f)
	}
	if props == nil {
		props = mapping()
		set(s, "properties", props)
	}
	if len(props.Content) == 0 {
		set(s, "description", str("Nothing: the path names what the call acts on. The body may be left out, or be {}."))
	} else {
		set(s, "description", str("The request's fields but those the path gives."))
	}
	set(all, name, s)
	return name, nil
}

// prose is a proto comment as a description: the comment's lines joined
// into paragraphs (a line that starts a list item stays on a line of its
// own).
func prose(s string) string {
	var out strings.Builder
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimPrefix(line, " ")
		switch {
		case i == 0:
		case line == "" || strings.HasPrefix(line, "- ") || strings.HasSuffix(out.String(), "\n"):
			out.WriteByte('\n')
			if line == "" {
				out.WriteByte('\n')
				continue
			}
		default:
			out.WriteByte(' ')
		}
		out.WriteString(line)
	}
	return strings.TrimSpace(strings.ReplaceAll(out.String(), "\n\n\n", "\n\n"))
}
