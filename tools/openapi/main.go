// Command openapi turns the OpenAPI 3.0 document protoc-gen-openapi writes
// from the protos' google.api.http rules into the OpenAPI 3.1 document the
// server serves at /openapi.json (`make generate` runs it after buf):
//
//	go run ./tools/openapi api/gen/openapi/openapi.yaml api/gen/openapi/openapi.json
//
// Besides the version, it adds what the protos cannot say: the bearer API
// key, 201 Created with Location on CreateJob, the Idempotency-Key header
// on CreateJob and TriggerJob, the error statuses (in the description),
// and one operationId per operation (the plugin gives a method's additional bindings its own
// name again). It drops a query parameter that repeats a path parameter.
// It deletes the 3.0 input, so that only the 3.1 document is checked in.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
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

const description = `Orrery's API over REST (JSON). The same calls are served over Connect, gRPC and gRPC-Web at /orrery.v1.SERVICE/METHOD, with the same authentication, roles, limits and audit.

Every call needs an API key: ` + "`Authorization: Bearer ork_...`" + `.

Errors answer a JSON status, {"code": N, "message": "...", "details": [...]}, whose message names the field at fault, with these HTTP statuses: 400 a malformed request or an unknown field; 401 no or a bad key; 403 a role or tenant that may not; 404 not found; 409 exists already, a version that is not current, or a state that refuses the call; 413 a body past the limit; 415 a compressed body or one that is not application/json; 422 a job, schedule or parameter that is not valid; 429 over a rate (Retry-After says when to retry) or a storage quota; 503 the database is unavailable (Retry-After).

A job is addressed by its id (/api/v1/jobs/{id}) or by namespace and name (/api/v1/namespaces/{namespace}/jobs/{name}).`

// upgrade rewrites the 3.0 document in place.
func upgrade(root *yaml.Node) error {
	set(root, "openapi", str("3.1.0"))
	info := get(root, "info")
	set(info, "description", str(description))
	comps := get(root, "components")
	if comps == nil {
		return fmt.Errorf("no components")
	}
	set(comps, "securitySchemes", mapping("apiKey", mapping(
		"type", str("http"), "scheme", str("bearer"),
		"description", str("An Orrery API key (ork_...), from `orrery keys create` or `make dev`'s .orrery/api-key."))))
	set(root, "security", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{mapping("apiKey", &yaml.Node{Kind: yaml.SequenceNode})}})

	paths := get(root, "paths")
	seen := map[string]int{}
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
			id.Value = name
			renameParams(op, names)
			dropShadowedQuery(op)
			switch base {
			case "JobService_CreateJob":
				created(op)
				idempotencyKey(op)
			case "RunService_TriggerJob":
				idempotencyKey(op)
			}
		}
	}
	return nil
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

// dropShadowedQuery drops a query parameter of the same name as a path
// parameter: the path gives it.
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
		"schema", mapping("type", str("string"), "maxLength", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "255"}))
	params := get(op, "parameters")
	if params == nil {
		params = &yaml.Node{Kind: yaml.SequenceNode}
		set(op, "parameters", params)
	}
	params.Content = append(params.Content, p)
}

func get(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func set(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, str(key), v)
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(kv); i += 2 {
		m.Content = append(m.Content, str(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return m
}

// writeJSON writes a YAML node as JSON, keeping the order of keys.
func writeJSON(w *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		w.WriteByte('{')
		for i := 0; i < len(n.Content); i += 2 {
			if i > 0 {
				w.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			w.Write(k)
			w.WriteByte(':')
			if err := writeJSON(w, n.Content[i+1]); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	case yaml.SequenceNode:
		w.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := writeJSON(w, c); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float", "!!bool":
			w.WriteString(n.Value)
		case "!!null":
			w.WriteString("null")
		default:
			s, _ := json.Marshal(n.Value)
			w.Write(s)
		}
	case yaml.AliasNode:
		return writeJSON(w, n.Alias)
	default:
		return fmt.Errorf("line %d: unexpected YAML node", n.Line)
	}
	return nil
}
