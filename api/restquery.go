package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api/restdoc"
)

// A REST request's query parameters are read here before vanguard reads
// them, so that every mistake in one is a 400 (or a 422 for a value of
// the right type that is not one of the field's) naming the parameter as
// the client wrote it: vanguard names the proto field (page_size for
// pageSize) and answers a map's key (labels.team=data) with 500. An enum
// takes its values' short names in any case (status=active for
// JOB_STATUS_ACTIVE), as a run's status filter does.

// checkQuery checks a request's query against the method's request
// message and rewrites what it normalizes (an enum's short name).
func checkQuery(u *url.URL, in protoreflect.MessageDescriptor) *queryError {
	if u.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return &queryError{http.StatusBadRequest, fmt.Sprintf("the query string: %v", err)}
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	changed := false
	given := map[protoreflect.FullName][]string{} // a field's names as given: page_size and pageSize are one
	for _, k := range keys {
		fd, err := queryField(in, k)
		if err != nil {
			return &queryError{http.StatusBadRequest, fmt.Sprintf("query parameter %s: %v", k, err)}
		}
		vs := q[k]
		given[fd.FullName()] = append(given[fd.FullName()], k)
		if n := len(given[fd.FullName()]); !fd.IsList() && (len(vs) > 1 || n > 1) {
			if n > 1 {
				return &queryError{http.StatusBadRequest, fmt.Sprintf("query parameter %s: given twice (as %s); it takes one value", k, strings.Join(given[fd.FullName()], " and "))}
			}
			return &queryError{http.StatusBadRequest, fmt.Sprintf("query parameter %s: given %d times; it takes one value", k, len(vs))}
		}
		for i, v := range vs {
			norm, err := queryValue(fd, v)
			if err != nil {
				err.msg = "query parameter " + k + ": " + err.msg
				return err
			}
			if norm != v {
				vs[i], changed = norm, true
			}
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return nil
}

// queryField resolves a query parameter's name (each part by its JSON or
// its proto name) to the field it sets, which must be a scalar or a list
// of scalars.
func queryField(in protoreflect.MessageDescriptor, key string) (protoreflect.FieldDescriptor, error) {
	md := in
	parts := strings.Split(key, ".")
	for i, part := range parts {
		fd := md.Fields().ByJSONName(part)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(part))
		}
		if fd == nil {
			return nil, fmt.Errorf("no such parameter (see /openapi.json)")
		}
		if fd.IsMap() {
			hint := ""
			if md.Fields().ByName("label") != nil {
				hint = "; give label=KEY:VALUE, once for each"
			}
			return nil, fmt.Errorf("%s is a map, which a query cannot give%s", strings.Join(parts[:i+1], "."), hint)
		}
		if i == len(parts)-1 {
			if fd.Kind() == protoreflect.MessageKind && !scalarMessage(fd.Message()) {
				return nil, fmt.Errorf("an object, which a query cannot give: give its fields (%s.FIELD)", key)
			}
			return fd, nil
		}
		if fd.IsList() || fd.Kind() != protoreflect.MessageKind {
			return nil, fmt.Errorf("%s has no fields", strings.Join(parts[:i+1], "."))
		}
		md = fd.Message()
	}
	return nil, fmt.Errorf("no such parameter")
}

// scalarMessage: a well-known type a query gives as one value.
func scalarMessage(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration":
		return true
	}
	return false
}

// queryError is a query's mistake: 400 for one that cannot be read (no
// such parameter, a value of the wrong type), 422 for a value of the
// right type that the field does not take.
type queryError struct {
	status int
	msg    string
}

func (e *queryError) connect() *connect.Error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New(e.msg))
}

func badType(v, what string) *queryError {
	return &queryError{http.StatusBadRequest, fmt.Sprintf("%q is not %s", v, what)}
}

// queryValue checks one value of a field as vanguard will read it (a
// number by JSON's grammar, a time or a duration by protojson's), and
// answers it normalized.
func queryValue(fd protoreflect.FieldDescriptor, v string) (string, *queryError) {
	var err error
	var what string
	switch fd.Kind() {
	case protoreflect.BoolKind:
		err, what = json.Unmarshal([]byte(v), new(bool)), "true or false"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		err, what = json.Unmarshal([]byte(v), new(int32)), fmt.Sprintf("an integer from %d to %d", math.MinInt32, math.MaxInt32)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		err, what = json.Unmarshal([]byte(v), new(int64)), "a 64-bit integer"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		err, what = json.Unmarshal([]byte(v), new(uint32)), fmt.Sprintf("an integer from 0 to %d", uint32(math.MaxUint32))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		err, what = json.Unmarshal([]byte(v), new(uint64)), "an unsigned 64-bit integer"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		var f float64
		if err, what = json.Unmarshal([]byte(v), &f), "a number"; err == nil && fd.Kind() == protoreflect.FloatKind && math.Abs(f) > math.MaxFloat32 {
			err = errors.New("out of range")
		}
	case protoreflect.EnumKind:
		return enumValue(fd.Enum(), v)
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			err, what = protojson.Unmarshal([]byte(strconv.Quote(v)), new(timestamppb.Timestamp)), "an RFC 3339 time (2026-11-29T08:00:00Z)"
		case "google.protobuf.Duration":
			err, what = protojson.Unmarshal([]byte(strconv.Quote(v)), new(durationpb.Duration)), "a duration in seconds (90s)"
		}
	case protoreflect.StringKind:
		if strings.ContainsRune(v, 0) {
			return v, &queryError{http.StatusUnprocessableEntity, "contains a NUL character"}
		}
	}
	if err != nil {
		return v, badType(v, what)
	}
	return v, nil
}

// enumValue reads an enum's value by its name or its short name (the name
// without the enum's prefix: active for JOB_STATUS_ACTIVE), in any case.
func enumValue(ed protoreflect.EnumDescriptor, v string) (string, *queryError) {
	var names, short []string
	for i := range ed.Values().Len() {
		names = append(names, string(ed.Values().Get(i).Name()))
	}
	if n, err := strconv.ParseInt(v, 10, 32); err == nil && !strings.HasPrefix(v, "+") { // a value's number, as JSON may give it
		if ev := ed.Values().ByNumber(protoreflect.EnumNumber(n)); ev != nil {
			return string(ev.Name()), nil
		}
	}
	prefix := restdoc.EnumPrefix(names)
	for _, n := range names {
		s := strings.TrimPrefix(n, prefix)
		if strings.EqualFold(v, n) || strings.EqualFold(v, s) {
			return n, nil
		}
		if !strings.HasSuffix(n, "_UNSPECIFIED") {
			short = append(short, strings.ToLower(s))
		}
	}
	return v, &queryError{http.StatusUnprocessableEntity, fmt.Sprintf("%q is not one of %s", v, strings.Join(short, ", "))}
}
