package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/orrery-dev/orrery/dag"
)

// jsonNamesHeader marks a request that came in over REST (restGuard sets
// it; withStatus drops a client's): its handler sees binary protobuf from
// vanguard, but its client wrote JSON. Its value is "1", or the path
// parameters' names (pathNames) when the path binds fields.
const jsonNamesHeader = "Orrery-Json-Names"

// pathNames writes a REST rule's renamings of path-bound fields (ref.id
// to id) as jsonNamesHeader's value.
func pathNames(names map[string]string) string {
	v := url.Values{}
	for from, to := range names {
		v.Set(from, to)
	}
	return v.Encode()
}

// jsonFieldNames names the fields in an error as a JSON client wrote them
// (pageSize, waitSeconds, spec.steps[0].forEach), where the handlers name
// them as the protos do (page_size): for REST and Connect's or gRPC-Web's
// JSON. A binary client keeps the protos' names, which its code uses.
func jsonFieldNames() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			var ce *connect.Error
			if err == nil || !errors.As(err, &ce) || !speaksJSON(req.Header()) {
				return res, err
			}
			md, ok := req.Spec().Schema.(protoreflect.MethodDescriptor)
			if !ok {
				return res, err
			}
			renames, _ := url.ParseQuery(req.Header().Get(jsonNamesHeader))
			msg := jsonPaths(ce.Message(), md.Input(), renames)
			return res, withMessage(ce, msg)
		}
	}
}

func speaksJSON(h http.Header) bool {
	if h.Get(jsonNamesHeader) != "" {
		return true
	}
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.HasSuffix(strings.TrimSpace(strings.ToLower(ct)), "json")
}

// jsonPaths rewrites the field path that starts each line of an error
// message ("page_size: 900 is outside 0..500"; alternatives joined by |)
// into JSON names, as far as the path names fields of md: a map's keys,
// list indexes and what is not a field stay as written. A field the path
// binds takes the path parameter's name (renames: ref.id to id).
func jsonPaths(msg string, md protoreflect.MessageDescriptor, renames url.Values) string {
	lines := strings.Split(msg, "\n")
	for i, line := range lines {
		path, rest, ok := strings.Cut(line, ": ")
		if !ok || path == "" || strings.ContainsAny(path, " \t\"") {
			continue
		}
		alts := strings.Split(path, "|")
		for j, a := range alts {
			if to := renames.Get(a); to != "" {
				alts[j] = to
				continue
			}
			alts[j] = jsonPath(a, md)
		}
		lines[i] = strings.Join(alts, "|") + ": " + rest
	}
	return strings.Join(lines, "\n")
}

// jsonPath is one field path (spec.steps[2].for_each) in JSON names.
func jsonPath(path string, md protoreflect.MessageDescriptor) string {
	parts := strings.Split(path, ".")
	var mapValue bool // the part is a map's key
	for i, part := range parts {
		if md == nil || md.ParentFile().Package() == "google.protobuf" {
			break // what follows is a JSON value's keys (params.p), or nothing
		}
		if mapValue {
			mapValue = false
			continue
		}
		name, index, _ := strings.Cut(part, "[")
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			fd = md.Fields().ByJSONName(name)
		}
		if fd == nil {
			break
		}
		parts[i] = fd.JSONName()
		if index != "" {
			parts[i] += "[" + index
		}
		switch {
		case fd.IsMap():
			mapValue = index == "" // spec.params.NAME: the next part is a key
			md = fd.MapValue().Message()
		default:
			md = fd.Message()
		}
	}
	return strings.Join(parts, ".")
}

// refuseNUL refuses a request holding a NUL character in any string (a
// field, a map's key or value, a list's item, a payload's text), naming
// where: no store takes one (PostgreSQL's text and jsonb refuse it), so
// every handler would otherwise meet it as a database error.
func refuseNUL() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if m, ok := req.Any().(proto.Message); ok && hasNUL(m.ProtoReflect()) {
				if path := nulAt(m.ProtoReflect(), ""); path != "" {
					return nil, unprocessable(&dag.FieldError{Field: path, Message: "contains a NUL character"})
				}
			}
			return next(ctx, req)
		}
	}
}

// hasNUL reports whether a string below m holds a NUL, without building
// a path (most requests have none: nulAt then names it).
func hasNUL(m protoreflect.Message) bool {
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				found = fd.MapKey().Kind() == protoreflect.StringKind && strings.IndexByte(k.String(), 0) >= 0 ||
					valueHasNUL(fd.MapValue(), mv)
				return !found
			})
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && !found; i++ {
				found = valueHasNUL(fd, l.Get(i))
			}
		default:
			found = valueHasNUL(fd, v)
		}
		return !found
	})
	return found
}

func valueHasNUL(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return strings.IndexByte(v.String(), 0) >= 0
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return hasNUL(v.Message())
	}
	return false
}

// nulAt is the path of the first string below m that holds a NUL, or "".
func nulAt(m protoreflect.Message, path string) string {
	var found string
	join := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := join(string(fd.Name()))
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if ks, ok := k.Interface().(string); ok && strings.ContainsRune(ks, 0) {
					found = p
				} else {
					found = nulValue(fd.MapValue(), mv, p+"."+k.String())
				}
				return found == ""
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if found = nulValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", p, i)); found != "" {
					break
				}
			}
		default:
			found = nulValue(fd, v, p)
		}
		return found == ""
	})
	return found
}

func nulValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if strings.ContainsRune(v.String(), 0) {
			return path
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return nulInMessage(v.Message(), path)
	}
	return ""
}

// nulInMessage is nulAt with the JSON values (Struct, Value, ListValue)
// named as their JSON is written: params.p, payload.list[1].b.
func nulInMessage(m protoreflect.Message, path string) string {
	fields := m.Descriptor().Fields()
	switch m.Descriptor().FullName() {
	case "google.protobuf.Struct":
		found := ""
		m.Get(fields.ByName("fields")).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			p := path + "." + k.String()
			if strings.ContainsRune(k.String(), 0) {
				found = path
			} else {
				found = nulInMessage(v.Message(), p)
			}
			return found == ""
		})
		return found
	case "google.protobuf.ListValue":
		l := m.Get(fields.ByName("values")).List()
		for i := range l.Len() {
			if found := nulInMessage(l.Get(i).Message(), fmt.Sprintf("%s[%d]", path, i)); found != "" {
				return found
			}
		}
		return ""
	case "google.protobuf.Value":
		fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
		if fd == nil {
			return ""
		}
		return nulValue(fd, m.Get(fd), path)
	}
	return nulAt(m, path)
}
