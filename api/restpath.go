package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/orrery-dev/orrery/api/restdoc"
)

// The REST paths' own fields: a field a rule's path binds (the job a path
// names) comes from the path only. Vanguard would take it from a query
// parameter or the body too, over the path's: DELETE /api/v1/jobs/A?ref.id=B
// deleted B, while every proxy, log and cache that trusts the URL saw A.

// pathRule is one google.api.http binding of a method: its verb, its path
// template's segments, the fields its path binds and its body.
type pathRule struct {
	verb     string
	segments []string // a literal, or {field.path}
	suffix   string   // the custom verb of the last segment (":pause"), or ""
	fields   []fieldPath
	body     string // "*", a field, or "" (none)
	template string
	in       protoreflect.MessageDescriptor // the request message
}

// fieldPath is a field bound by a path, as the proto names it and as
// JSON does (each part's JSON name).
type fieldPath struct{ proto, json []string }

func (f fieldPath) String() string { return strings.Join(f.proto, ".") }

// pathRules reads the google.api.http bindings of services.
func pathRules(services []service) ([]pathRule, error) {
	var out []pathRule
	for _, s := range services {
		name := protoreflect.FullName(strings.Trim(s.path, "/"))
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", name, err)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("%s is not a service", name)
		}
		for i := range sd.Methods().Len() {
			m := sd.Methods().Get(i)
			rule, ok := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
			if !ok || rule == nil {
				continue
			}
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				pr, err := newPathRule(r, m.Input())
				if err != nil {
					return nil, fmt.Errorf("%s: %w", m.FullName(), err)
				}
				if pr.verb != "" {
					out = append(out, pr)
				}
			}
		}
	}
	return out, nil
}

func newPathRule(r *annotations.HttpRule, in protoreflect.MessageDescriptor) (pathRule, error) {
	var verb, template string
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		verb, template = http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		verb, template = http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		verb, template = http.MethodPut, p.Put
	case *annotations.HttpRule_Patch:
		verb, template = http.MethodPatch, p.Patch
	case *annotations.HttpRule_Delete:
		verb, template = http.MethodDelete, p.Delete
	default:
		return pathRule{}, nil
	}
	pr := pathRule{verb: verb, body: r.GetBody(), template: template, in: in}
	path := template
	if i := strings.LastIndexByte(path, ':'); i > strings.LastIndexByte(path, '/') && !strings.HasSuffix(path, "}") {
		path, pr.suffix = path[:i], path[i:]
	}
	pr.segments = strings.Split(strings.Trim(path, "/"), "/")
	for _, seg := range pr.segments {
		if !strings.HasPrefix(seg, "{") {
			continue
		}
		f, err := resolveField(in, strings.Trim(seg, "{}"))
		if err != nil {
			return pathRule{}, fmt.Errorf("%s: %w", template, err)
		}
		pr.fields = append(pr.fields, f)
	}
	return pr, nil
}

// resolveField finds a field path's parts in a message, and their JSON
// names.
func resolveField(m protoreflect.MessageDescriptor, path string) (fieldPath, error) {
	var f fieldPath
	for part := range strings.SplitSeq(path, ".") {
		if m == nil {
			return f, fmt.Errorf("%s: %s is not in a message", path, part)
		}
		fd := m.Fields().ByName(protoreflect.Name(part))
		if fd == nil {
			return f, fmt.Errorf("%s: no field %s", path, part)
		}
		f.proto, f.json = append(f.proto, part), append(f.json, fd.JSONName())
		m = fd.Message()
	}
	return f, nil
}

// match reports whether the rule serves method and path (below the
// server's root), splitting the path as vanguard routes it: each "/" ends
// a segment (a trailing one leaves an empty last segment, which a path
// variable takes), and a custom verb follows the last segment's first
// ":". It answers the path's segments.
func (r pathRule) match(method, path string) ([]string, bool) {
	if method != r.verb {
		return nil, false
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	last, verb := segs[len(segs)-1], ""
	if i := strings.IndexByte(last, ':'); i >= 0 {
		last, verb = last[:i], last[i:]
	}
	segs[len(segs)-1] = last
	if verb != r.suffix || len(segs) != len(r.segments) {
		return nil, false
	}
	for i, s := range r.segments {
		if !strings.HasPrefix(s, "{") && segs[i] != s {
			return nil, false
		}
	}
	return segs, true
}

// emptyVariable names a path variable the path leaves empty
// (/api/v1/jobs/ for /api/v1/jobs/{id}), as the document names it.
func (r pathRule) emptyVariable(segs []string) string {
	_, names := restdoc.Path(r.template)
	for i, s := range r.segments {
		if strings.HasPrefix(s, "{") && segs[i] == "" {
			if to, ok := names[strings.Trim(s, "{}")]; ok {
				return to
			}
			return strings.Trim(s, "{}")
		}
	}
	return ""
}

// restPaths refuses, with 400 naming it, a query parameter or body field
// that the path of the rule serving the request binds, and checks the
// query (checkQuery).
func restPaths(next http.Handler, rules []pathRule) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, rule := range rules {
			segs, ok := rule.match(r.Method, r.URL.Path)
			if !ok {
				continue
			}
			if name := rule.emptyVariable(segs); name != "" {
				path, _ := restdoc.Path(rule.template)
				writeRESTError(w, connect.NewError(connect.CodeInvalidArgument,
					fmt.Errorf("path parameter %s is empty (%s %s)", name, rule.verb, path)))
				return
			}
			if err := rule.refuseShadows(r); err != nil {
				writeRESTError(w, connect.NewError(connect.CodeInvalidArgument, err))
				return
			}
			if err := checkQuery(r.URL, rule.in); err != nil {
				writeRESTErrorStatus(w, err.status, err.connect())
				return
			}
			// The handler's errors name a path-bound field as the
			// document's path parameter (id for ref.id, run_id for id).
			if _, names := restdoc.Path(rule.template); len(names) > 0 {
				r.Header.Set(jsonNamesHeader, pathNames(names))
			}
			break
		}
		next.ServeHTTP(w, r)
	})
}

// refuseShadows says which field the path binds that the query or the
// body gives too; it leaves the body as it was read. A field of the message
// a bound field is in (ref.name beside a path's ref.id: the same job, named
// another way) is refused alike.
func (rule pathRule) refuseShadows(r *http.Request) error {
	if len(rule.fields) == 0 {
		return nil
	}
	for key := range r.URL.Query() {
		for _, f := range rule.fields {
			for _, names := range [][]string{f.proto, f.json} {
				whole := strings.Join(names, ".")
				group := strings.Join(names[:len(names)-1], ".")
				if key == whole || len(names) > 1 && strings.HasPrefix(key, group+".") {
					path, _ := restdoc.Path(rule.template)
					return fmt.Errorf("query parameter %s: the path gives it (%s %s); a field the path binds comes from the path only", key, rule.verb, path)
				}
			}
		}
	}
	if rule.body != "*" || r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	var body map[string]any
	if json.Unmarshal(b, &body) != nil {
		return nil // not an object: the codec says what is wrong with it
	}
	for _, f := range rule.fields {
		if len(f.proto) > 1 { // the whole message the bound field is in
			f = fieldPath{proto: f.proto[:len(f.proto)-1], json: f.json[:len(f.json)-1]}
		}
		if name, ok := inBody(body, f); ok {
			path, _ := restdoc.Path(rule.template)
			return fmt.Errorf("body field %s: the path gives it (%s %s); a field the path binds comes from the path only", name, rule.verb, path)
		}
	}
	return nil
}

// inBody finds a field path in a decoded JSON body, by either name of each
// part, and returns it as the body wrote it.
func inBody(body map[string]any, f fieldPath) (string, bool) {
	var written []string
	cur := body
	for i := range f.proto {
		v, name, ok := lookup(cur, f.proto[i], f.json[i])
		if !ok {
			return "", false
		}
		written = append(written, name)
		if i == len(f.proto)-1 {
			return strings.Join(written, "."), true
		}
		if cur, ok = v.(map[string]any); !ok {
			return "", false
		}
	}
	return "", false
}

func lookup(m map[string]any, names ...string) (any, string, bool) {
	for _, n := range names {
		if v, ok := m[n]; ok {
			return v, n, true
		}
	}
	return nil, "", false
}
