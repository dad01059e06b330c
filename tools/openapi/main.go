// Command openapi turns the OpenAPI 3.0 document protoc-gen-openapi writes
// from the protos' google.api.http rules into the OpenAPI 3.1 document the
// server serves at /openapi.json (`make generate` runs it after buf):
//
//	go run ./tools/openapi api/gen/openapi/openapi.yaml api/gen/openapi/openapi.json
//
// Besides the version, it adds what the protos cannot say: a summary for
// every operation (ops.go), its error statuses with the Status schema and
// Retry-After where it applies, the fields the server always needs and
// always sets (schemas.go), request bodies without the fields the path
// gives and required only where the server needs one, the bearer API key,
// servers, 201 Created with Location on CreateJob, the Idempotency-Key
// header on CreateJob and TriggerJob, the short names an enum query
// parameter takes, types for free-form values, WorkerService's Connect
// errors, and one operationId per operation (the plugin gives a method's
// additional bindings its own name again). It names path parameters as
// api/restdoc does, and drops a query parameter that repeats a path
// parameter. It deletes the 3.0 input, so that only the 3.1 document is
// checked in.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/orrery-dev/orrery/api/restdoc"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: openapi IN.yaml OUT.json")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	root := doc.Content[0]
	if err := upgrade(root); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, root); err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, buf.Bytes(), "", "  "); err != nil {
		return err
	}
	pretty.WriteByte('\n')
	if err := os.WriteFile(out, pretty.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Remove(in)
}

const description = `Orrery's API over REST (JSON). The same calls are served over Connect, gRPC and gRPC-Web at /orrery.v1.SERVICE/METHOD, with the same authentication, roles, limits and audit. WorkerService, which remote workers call, is served over those only: its operations here are Connect's JSON protocol (a POST of a JSON body to /orrery.v1.WorkerService/METHOD).

Every call needs an API key: ` + "`Authorization: Bearer ork_...`" + `.

Errors answer a JSON status, {"code": N, "message": "...", "details": []}, whose message names the field at fault as JSON names it (pageSize, spec.schedule.cron), one line per problem. Each operation lists the statuses it answers: 400 a request that cannot be read (malformed JSON, with its line and column; an unknown field or parameter; a value of the wrong type; a field the path gives); 401 no or a bad key; 403 a role or tenant that may not; 404 not found; 409 exists already, a version that is not current, or a state that refuses the call; 413 a body past the limit; 415 a compressed body or one that is not application/json; 422 a value that is not valid; 429 over a rate (Retry-After says when to retry) or a quota; 503 the database is unavailable (Retry-After).

A job is addressed by its id (/api/v1/jobs/{id}) or by namespace and name (/api/v1/namespaces/{namespace}/jobs/{name}). Lists page with pageSize and pageToken (nextPageToken is empty on the last page); job lists filter by labels with label=KEY:VALUE, repeatable. An enum in a query takes its short name in any case (status=active).`

// upgrade rewrites the 3.0 document in place.
func upgrade(root *yaml.Node) error {
	set(root, "openapi", str("3.1.0"))
	info := get(root, "info")
	set(info, "description", str(description))
	set(info, "contact", mapping("name", str("Orrery"), "url", str("https://github.com/orrery-dev/orrery")))
	set(root, "servers", seq(mapping("url", str("/"), "description", str("The server that serves this document"))))
	comps := get(root, "components")
	if comps == nil {
		return fmt.Errorf("no components")
	}
	set(comps, "securitySchemes", mapping("apiKey", mapping(
		"type", str("http"), "scheme", str("bearer"),
		"description", str("An Orrery API key (ork_...), from `orrery keys create` or `make dev`'s .orrery/api-key."))))
	set(root, "security", seq(mapping("apiKey", seq())))
	responses := mapping()
	for _, e := range errorResponses {
		r := mapping("description", str(e.description))
		if e.retryAfter {
			set(r, "headers", mapping("Retry-After", mapping(
				"description", str("Seconds to wait before retrying, when waiting helps."),
				"schema", mapping("type", str("integer"), "minimum", num(1)))))
		}
		set(r, "content", mapping("application/json", mapping("schema", ref("Status"))))
		set(responses, e.name, r)
	}
	set(comps, "responses", responses)

	paths := get(root, "paths")
	seen := map[string]int{}
	used := map[string]bool{}
	for i := 0; i < len(paths.Content); i += 2 {
		path := paths.Content[i].Value
		item := paths.Content[i+1]
		restPath, names := restdoc.Path(path)
		paths.Content[i].Value = restPath
		for j := 0; j < len(item.Content); j += 2 {
			verb, op := item.Content[j].Value, item.Content[j+1]
			id := get(op, "operationId")
			if id == nil {
				return fmt.Errorf("%s %s: no operationId", verb, path)
			}
			base := id.Value
			id.Value = operationID(base, verb, path, seen)
			summary, ok := summaries[id.Value]
			if !ok {
				return fmt.Errorf("%s %s: no summary for %s", verb, path, id.Value)
			}
			used[id.Value] = true
			set(op, "summary", str(summary))
			if err := describe(op, base); err != nil {
				return fmt.Errorf("%s %s: %w", verb, path, err)
			}
			bound := boundFields(op)
			renameParams(op, names)
			dropShadowedQuery(op)
			enumParams(op)
			body, err := requestBody(root, op, bound)
			if err != nil {
				return fmt.Errorf("%s %s: %w", verb, path, err)
			}
			worker := strings.HasPrefix(base, "WorkerService_")
			if worker {
				connectErrors(op, workerErrorCodes(base))
			} else {
				errorRefs(op, errorCodes(base, restPath, body, body || get(op, "parameters") != nil))
			}
			switch base {
			case "JobService_CreateJob":
				created(op)
				idempotencyKey(op)
			case "RunService_TriggerJob":
				idempotencyKey(op)
			}
		}
	}
	for id := range summaries {
		if !used[id] {
			return fmt.Errorf("summaries names %s, which is not an operation", id)
		}
	}
	for _, t := range get(root, "tags").Content {
		if d := get(t, "description"); d != nil {
			d.Value = prose(d.Value)
		}
	}
	return schemas(root)
}

// operationID names an operation: the plugin names a method's additional
// bindings as the method again.
func operationID(base, verb, path string, seen map[string]int) string {
	name := base
	if base == "RunService_ListRuns" && strings.Contains(path, "/jobs/") {
		name += "OfJob"
	}
	if strings.Contains(path, "{ref.name}") || strings.Contains(path, "{job.name}") {
		name += "ByName"
	}
	if strings.Contains(path, "{namespace}") {
		name += "InNamespace"
	}
	if base == "JobService_UpdateJob" && verb == "put" {
		name += "Put"
	}
	if strings.HasSuffix(path, ":runNow") {
		name += "RunNow"
	}
	if seen[name]++; seen[name] > 1 {
		name += strconv.Itoa(seen[name])
	}
	return name
}

// describe makes the method's comment the operation's description, without
// its leading method name ("ListRuns pages through runs" becomes "Pages
// through runs"), and every description below it prose.
func describe(op *yaml.Node, base string) error {
	walk(op, func(n *yaml.Node) {
		if d := get(n, "description"); n.Kind == yaml.MappingNode && d != nil && d.Kind == yaml.ScalarNode {
			d.Value = prose(d.Value)
		}
	})
	d := get(op, "description")
	if d == nil || d.Value == "" {
		return fmt.Errorf("%s has no comment", base)
	}
	_, method, _ := strings.Cut(base, "_")
	if rest, ok := strings.CutPrefix(d.Value, method+" "); ok {
		d.Value = strings.ToUpper(rest[:1]) + rest[1:]
	}
	return nil
}

// boundFields are the request fields an operation's path binds, as the
// protos name them (ref.id binds ref): the body must not give them.
func boundFields(op *yaml.Node) []string {
	var out []string
	params := get(op, "parameters")
	if params == nil {
		return nil
	}
	for _, p := range params.Content {
		if get(p, "in").Value == "path" {
			top, _, _ := strings.Cut(get(p, "name").Value, ".")
			if !slices.Contains(out, top) {
				out = append(out, top)
			}
		}
	}
	return out
}

// requestBody points an operation's body at a schema without the fields
// its path binds, and requires a body only when the schema has a field the
// server needs. It reports whether the operation takes a body.
func requestBody(root *yaml.Node, op *yaml.Node, bound []string) (bool, error) {
	b := get(op, "requestBody")
	if b == nil {
		return false, nil
	}
	schema := get(get(get(b, "content"), "application/json"), "schema")
	r := get(schema, "$ref")
	if r == nil {
		return false, fmt.Errorf("a body that is not a message")
	}
	name, err := bodySchema(root, strings.TrimPrefix(r.Value, "#/components/schemas/"), bound)
	if err != nil {
		return false, err
	}
	r.Value = "#/components/schemas/" + name
	set(b, "required", boolean(len(needed[name]) > 0 || slices.Contains(someOf, name)))
	return true, nil
}

// errorRefs lists an operation's error statuses from
// components.responses, keeping default for the rest (500, 504).
func errorRefs(op *yaml.Node, codes []int) {
	resp := get(op, "responses")
	def := get(resp, "default")
	del(resp, "default")
	for _, c := range codes {
		set(resp, strconv.Itoa(c), mapping("$ref", str("#/components/responses/"+errorResponseOf(c).name)))
	}
	if def != nil {
		set(def, "description", str("Any other error: 500 internal (the server's log says more), 504 a deadline passed."))
		set(resp, "default", def)
	}
}

// connectErrors lists a WorkerService method's error statuses, answered
// as Connect answers them.
func connectErrors(op *yaml.Node, codes []int) {
	resp := get(op, "responses")
	del(resp, "default")
	set(get(resp, "200"), "description", str("OK. Empty fields are left out: an answer with nothing in it is {}."))
	for _, c := range codes {
		e := errorResponseOf(c)
		if d, ok := connectDescriptions[c]; ok {
			e.description = d
		}
		r := mapping("description", str(e.description))
		if e.retryAfter {
			set(r, "headers", mapping("Retry-After", mapping(
				"description", str("Seconds to wait before retrying, when waiting helps."),
				"schema", mapping("type", str("integer"), "minimum", num(1)))))
		}
		if c != 415 { // Connect answers a body of no type it knows with no body
			set(r, "content", mapping("application/json", mapping("schema", ref("ConnectError"))))
		}
		set(resp, strconv.Itoa(c), r)
	}
	set(resp, "default", mapping("description", str("Any other error, as Connect answers it."),
		"content", mapping("application/json", mapping("schema", ref("ConnectError")))))
}

// enumParams lets an enum query parameter take its values' short names
// (status=active for JOB_STATUS_ACTIVE), as the server does, and drops
// the unspecified value (leave the parameter out instead).
func enumParams(op *yaml.Node) {
	params := get(op, "parameters")
	if params == nil {
		return
	}
	for _, p := range params.Content {
		s := get(p, "schema")
		enum := get(s, "enum")
		if get(p, "in").Value != "query" || enum == nil {
			continue
		}
		var short, full []string
		for _, v := range enum.Content {
			if strings.HasSuffix(v.Value, "_UNSPECIFIED") {
				continue
			}
			full = append(full, v.Value)
		}
		prefix := restdoc.EnumPrefix(full)
		for _, v := range full {
			short = append(short, strings.ToLower(strings.TrimPrefix(v, prefix)))
		}
		set(s, "enum", strs(append(short, full...)...))
		del(s, "format")
		text := "One of " + strings.Join(short[:len(short)-1], ", ") + " or " + short[len(short)-1] + ", in any case (or the enum's names: " + full[0] + ")."
		if d := get(p, "description"); d != nil && d.Value != "" {
			text = d.Value + " " + text
		}
		set(p, "description", str(text))
	}
}

// renameParams renames an operation's path parameters, and drops the query
// parameters of the message a renamed one is in (ref.name beside ref.id):
// the server refuses them (a field the path binds comes from the path
// only).
func renameParams(op *yaml.Node, names map[string]string) {
	params := get(op, "parameters")
	if params == nil || len(names) == 0 {
		return
	}
	groups := map[string]bool{}
	for from := range names {
		if i := strings.LastIndexByte(from, '.'); i > 0 {
			groups[from[:i+1]] = true
		}
	}
	kept := params.Content[:0]
	for _, p := range params.Content {
		name := get(p, "name")
		switch get(p, "in").Value {
		case "path":
			if to, ok := names[name.Value]; ok {
				name.Value = to
			}
		case "query":
			if i := strings.LastIndexByte(name.Value, '.'); i > 0 && groups[name.Value[:i+1]] {
				continue
			}
		}
		kept = append(kept, p)
	}
	params.Content = kept
}

// dropShadowedQuery drops a query parameter that has a path parameter's
// name once those are renamed: another field of the request (ListRuns'
// namespace filter, beside {namespace}, which is job.namespace). A
// client could not tell the two apart by name, and where the path names
// the job the filter says nothing more; the server still reads it.
func dropShadowedQuery(op *yaml.Node) {
	params := get(op, "parameters")
	if params == nil {
		return
	}
	inPath := map[string]bool{}
	for _, p := range params.Content {
		if get(p, "in").Value == "path" {
			inPath[get(p, "name").Value] = true
		}
	}
	kept := params.Content[:0]
	for _, p := range params.Content {
		if get(p, "in").Value == "query" && inPath[get(p, "name").Value] {
			continue
		}
		kept = append(kept, p)
	}
	params.Content = kept
}

// created answers 201 with Location instead of 200.
func created(op *yaml.Node) {
	resp := get(op, "responses")
	for i := 0; i < len(resp.Content); i += 2 {
		if resp.Content[i].Value == "200" {
			resp.Content[i].Value = "201"
			r := resp.Content[i+1]
			set(r, "description", str("Created (and on a replay of the same idempotency key)"))
			set(r, "headers", mapping("Location", mapping(
				"description", str("The job's path, /api/v1/jobs/{id}"),
				"schema", mapping("type", str("string")))))
		}
	}
}

func idempotencyKey(op *yaml.Node) {
	p := mapping("name", str("Idempotency-Key"), "in", str("header"),
		"description", str("A replay with the same key answers the first answer; another body under the same key is 409. The same as the body's idempotencyKey (both set and different: 400)."),
		"schema", mapping("type", str("string"), "maxLength", num(255)))
	params := get(op, "parameters")
	if params == nil {
		params = seq()
		set(op, "parameters", params)
	}
	params.Content = append(params.Content, p)
}
