package dag

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unknownFieldError is a mapping key that names no field of the target.
type unknownFieldError struct {
	node *yaml.Node
	path string
	msg  string
}

func (e *unknownFieldError) Error() string { return e.path + ": " + e.msg }

var yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

// checkKnownFields walks the node tree beside the Go type and reports the
// first mapping key that the type does not have, with the fields it does.
func checkKnownFields(n *yaml.Node, out any) error {
	return checkNode(n, reflect.TypeOf(out), "")
}

func checkNode(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		if reflect.PointerTo(t.Elem()).Implements(yamlUnmarshaler) && t.Elem().Kind() != reflect.Pointer {
			return nil
		}
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(yamlUnmarshaler) {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // yaml.v3 reports the type mismatch with its line
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			ft, ok := fields[k.Value]
			p := join(path, k.Value)
			if !ok {
				names := make([]string, 0, len(fields))
				for name := range fields {
					names = append(names, name)
				}
				sort.Strings(names)
				return &unknownFieldError{node: k, path: p, msg: fmt.Sprintf("unknown field %q (known: %s)", k.Value, strings.Join(names, ", "))}
			}
			if err := checkNode(n.Content[i+1], ft, p); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, item := range n.Content {
			if err := checkNode(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlFields maps the YAML keys of struct t to their types, with yaml.v3's
// naming: the yaml tag, else the lowercased field name.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}
