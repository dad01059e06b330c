package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictJSON is Connect's JSON codec but for unknown fields: a request
// naming a field its message does not have is refused (invalid_argument,
// HTTP 400), the error naming the field's path, where Connect's own codec
// drops it. A job sent under a misspelt key is refused for that key, not
// for the empty job it left. Binary requests keep protobuf's rule (unknown
// fields are kept, not read): a client built from newer protos still
// talks to an older server that way.
type strictJSON struct{ name string }

// strictJSONCodecs replace both names Connect registers its JSON codec
// under.
func strictJSONCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithCodec(strictJSON{"json"}), connect.WithCodec(strictJSON{"json; charset=utf-8"})}
}

func (c strictJSON) Name() string { return c.name }

func (strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (strictJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	return unmarshalStrict(protojson.UnmarshalOptions{}, b, pm)
}

// unmarshalStrict unmarshals b into pm with o (which must not discard
// unknown fields), naming an unknown field's path when there is one.
func unmarshalStrict(o protojson.UnmarshalOptions, b []byte, pm proto.Message) error {
	err := o.Unmarshal(b, pm)
	if err == nil {
		return nil
	}
	if syntax := jsonSyntax(b); syntax != nil {
		return syntax
	}
	if !strings.Contains(err.Error(), "unknown field") {
		return protojsonError(err)
	}
	var doc any
	if json.Unmarshal(b, &doc) == nil {
		if path := unknownField(doc, pm.ProtoReflect().Descriptor(), ""); path != "" {
			return fmt.Errorf("%s: unknown field (see the API reference for %s)", path, pm.ProtoReflect().Descriptor().FullName())
		}
	}
	return err
}

// jsonSyntax says where a body is not JSON (protojson says "unexpected
// EOF" without a place), or nil when it is JSON.
func jsonSyntax(b []byte) error {
	var syntax *json.SyntaxError
	if err := json.Unmarshal(b, new(json.RawMessage)); !errors.As(err, &syntax) {
		return nil
	}
	// Offset counts the byte at fault, but for a body cut short, whose
	// place is past its end.
	at := min(int(syntax.Offset), len(b))
	if at > 0 && !strings.Contains(syntax.Error(), "unexpected end") {
		at--
	}
	line, col := 1, 1 // col counts characters, as an editor does
	for _, c := range string(b[:at]) {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("the body is not valid JSON: %s (line %d, column %d)", syntax.Error(), line, col)
}

// protojsonError is a protojson error without its "proto:" prefix (which
// protojson writes with a space or a no-break space, at random), its
// place written as jsonSyntax writes one: "(line 1:23): invalid value for
// string field name: 5" becomes "invalid value for string field name: 5
// (line 1, column 23)".
func protojsonError(err error) error {
	msg := strings.TrimLeft(strings.TrimPrefix(err.Error(), "proto:"), " \u00a0")
	if rest, ok := strings.CutPrefix(msg, "(line "); ok {
		if place, what, ok := strings.Cut(rest, "): "); ok {
			if line, col, ok := strings.Cut(place, ":"); ok {
				return fmt.Errorf("%s (line %s, column %s)", what, line, col)
			}
		}
	}
	return errors.New(msg)
}

// unknownField is the path (JSON names, list indexes) of the first key of
// doc, in key order, that message md has no field for; "" when there is
// none it can see. Well-known types (Struct, Timestamp, ...) hold any
// keys.
func unknownField(doc any, md protoreflect.MessageDescriptor, path string) string {
	obj, ok := doc.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return ""
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			return p
		}
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			continue
		}
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			if m, ok := obj[k].(map[string]any); ok {
				mk := make([]string, 0, len(m))
				for key := range m {
					mk = append(mk, key)
				}
				slices.Sort(mk)
				for _, key := range mk {
					if u := unknownField(m[key], fd.MapValue().Message(), p+"."+key); u != "" {
						return u
					}
				}
			}
		case fd.IsList():
			if list, ok := obj[k].([]any); ok {
				for i, e := range list {
					if u := unknownField(e, fd.Message(), fmt.Sprintf("%s[%d]", p, i)); u != "" {
						return u
					}
				}
			}
		default:
			if u := unknownField(obj[k], fd.Message(), p); u != "" {
				return u
			}
		}
	}
	return ""
}
