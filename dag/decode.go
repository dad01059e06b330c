package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Document is one decoded, normalized and validated Job from a file.
type Document struct {
	Resource Resource
	File     string
	Line     int // where the document starts
	root     *yaml.Node
}

// Decode reads every YAML document in data. It returns the documents that
// decoded and every problem found, each with file, line and column: YAML
// syntax, unknown fields, wrong types and everything Validate reports.
func Decode(file string, data []byte) ([]*Document, Errors) {
	var docs []*Document
	var es Errors
	if !utf8.Valid(data) {
		return nil, Errors{notText(file, data)}
	}
	nodes := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var root yaml.Node
		err := nodes.Decode(&root)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			es = append(es, syntaxError(file, err))
			break
		}
		if len(root.Content) == 0 || root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null" {
			continue // an empty document, as after a trailing ---
		}
		doc := &Document{File: file, Line: root.Content[0].Line, root: root.Content[0]}
		if derr := decodeStrict(doc.root, &doc.Resource); derr != nil {
			es = append(es, doc.typeErrors(derr)...)
			continue
		}
		doc.Resource.Normalize()
		for _, e := range Validate(&doc.Resource) {
			e.File = file
			e.Line, e.Col = doc.Position(e.Field)
			if line, col, ok := doc.valuePosition(e.Field, e.Offset); ok && e.Offset > 0 {
				e.Line, e.Col = line, col
			}
			es = append(es, e)
		}
		docs = append(docs, doc)
	}
	return docs, es
}

// decodeStrict decodes one document, rejecting unknown fields with their
// position (yaml.v3's KnownFields works only on streams and names no column).
func decodeStrict(n *yaml.Node, out *Resource) error {
	if err := checkKnownFields(n, out); err != nil {
		return err
	}
	return n.Decode(out)
}

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// typeErrors turns yaml.v3's decoding errors into FieldErrors.
func (d *Document) typeErrors(err error) Errors {
	var es Errors
	var unknown *unknownFieldError
	if errors.As(err, &unknown) {
		return Errors{{File: d.File, Line: unknown.node.Line, Col: unknown.node.Column, Field: unknown.path, Message: unknown.msg}}
	}
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for _, msg := range msgs {
		fe := &FieldError{File: d.File, Message: msg}
		if m := lineRE.FindStringSubmatch(msg); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
			fe.Message = strings.TrimPrefix(m[2], "line "+m[1]+": ")
			fe.Field, fe.Col = d.fieldAtLine(fe.Line)
		} else {
			fe.Line, fe.Col = d.Line, 1
		}
		es = append(es, fe)
	}
	return es
}

// notText names where data stops being UTF-8 text (YAML must be): the
// line and column (in characters) of its first byte that is not.
func notText(file string, data []byte) *FieldError {
	line, col := 1, 1
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		if r == utf8.RuneError && n <= 1 {
			break
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		data = data[n:]
	}
	return &FieldError{File: file, Line: line, Col: col, Message: "not UTF-8 text (YAML must be)"}
}

func syntaxError(file string, err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	fe := &FieldError{File: file, Message: msg}
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		fe.Line, _ = strconv.Atoi(m[1])
		fe.Col = 1
		fe.Message = m[2]
	}
	return fe
}

// Position returns the line and column of the field at path
// ("spec.steps[1].run.http.url"), or of its closest ancestor present in the
// YAML when the field itself is missing.
func (d *Document) Position(path string) (line, col int) {
	n := d.root
	if n == nil {
		return 0, 0
	}
	// The `run:` shorthand was normalized into steps[0]; map back.
	if rest, ok := strings.CutPrefix(path, "spec.steps[0]."); ok && lookup(n, "spec.steps") == nil {
		path = "spec." + rest
	}
	line, col = n.Line, n.Column
	cur := n
	for _, seg := range splitPath(path) {
		next := child(cur, seg)
		if next == nil {
			break
		}
		cur = next
		line, col = cur.Line, cur.Column
	}
	return line, col
}

// valuePosition is where the byte at offset of a field's text shows, when
// the field is a scalar written on one line, plain or quoted without
// escapes; ok is false when the text cannot be mapped so simply.
func (d *Document) valuePosition(path string, offset int) (line, col int, ok bool) {
	segs := splitPath(path)
	if d.root == nil || len(segs) == 0 {
		return 0, 0, false
	}
	n := d.root
	for _, seg := range segs[:len(segs)-1] {
		if n = child(n, seg); n == nil {
			return 0, 0, false
		}
	}
	n = scalarValue(n, segs[len(segs)-1])
	if n == nil || strings.ContainsAny(n.Value, "\n") || offset > len(n.Value) {
		return 0, 0, false
	}
	cols := utf8.RuneCountInString(n.Value[:offset])
	switch {
	case n.Style == 0:
	case n.Style == yaml.SingleQuotedStyle && !strings.Contains(n.Value, "'"),
		n.Style == yaml.DoubleQuotedStyle && !strings.ContainsAny(n.Value, `"\\`):
		cols++
	default:
		return 0, 0, false
	}
	return n.Line, n.Column + cols, true
}

// scalarValue is the scalar value of a mapping key or a sequence item.
func scalarValue(n *yaml.Node, seg string) *yaml.Node {
	var v *yaml.Node
	if strings.HasPrefix(seg, "[") {
		v = child(n, seg)
	} else if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				v = n.Content[i+1]
			}
		}
	}
	if v == nil || v.Kind != yaml.ScalarNode {
		return nil
	}
	return v
}

func lookup(n *yaml.Node, path string) *yaml.Node {
	for _, seg := range splitPath(path) {
		if n = child(n, seg); n == nil {
			return nil
		}
	}
	return n
}

// splitPath splits "spec.steps[1].name" into spec, steps, [1], name.
func splitPath(path string) []string {
	var segs []string
	for _, part := range strings.Split(path, ".") {
		for {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				break
			}
			if i > 0 {
				segs = append(segs, part[:i])
			}
			j := strings.IndexByte(part, ']')
			if j < i {
				break
			}
			segs = append(segs, part[i:j+1])
			part = part[j+1:]
		}
		if part != "" {
			segs = append(segs, part)
		}
	}
	return segs
}

// child returns the value node for a mapping key, or the item of a
// sequence for "[i]". For a mapping it returns the key node when the value
// is a scalar, so that positions point at "name: value".
func child(n *yaml.Node, seg string) *yaml.Node {
	if strings.HasPrefix(seg, "[") {
		i, err := strconv.Atoi(strings.Trim(seg, "[]"))
		if err != nil || n.Kind != yaml.SequenceNode || i >= len(n.Content) {
			return nil
		}
		return n.Content[i]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == seg {
			if v := n.Content[i+1]; v.Kind == yaml.ScalarNode {
				return n.Content[i]
			} else {
				return v
			}
		}
	}
	return nil
}

// fieldAtLine finds the path of the first node on line, for errors that
// yaml.v3 reports by line only.
func (d *Document) fieldAtLine(line int) (string, int) {
	var walk func(n *yaml.Node, path string) (string, int, bool)
	walk = func(n *yaml.Node, path string) (string, int, bool) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := path // a key that is a list or a map names no field: its map's
				if uk := unalias(k); uk.Kind == yaml.ScalarNode {
					p = join(path, uk.Value)
				}
				if k.Line == line || v.Line == line && v.Kind == yaml.ScalarNode {
					return p, k.Column, true
				}
				if p2, c, ok := walk(v, p); ok {
					return p2, c, true
				}
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if item.Line == line && item.Kind == yaml.ScalarNode {
					return p, item.Column, true
				}
				if p2, c, ok := walk(item, p); ok {
					return p2, c, true
				}
			}
		}
		return "", 0, false
	}
	if p, c, ok := walk(d.root, ""); ok {
		return p, c
	}
	return "", 1
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// UnmarshalYAML decodes any YAML value with a JSON form into JSON text.
func (p *Payload) UnmarshalYAML(n *yaml.Node) error {
	// yaml.v3 fails on a key that is a list or a map with no position.
	if k := nonScalarKey(n, map[*yaml.Node]bool{}); k != nil {
		kind := "list"
		if unalias(k).Kind == yaml.MappingNode {
			kind = "map"
		}
		return fmt.Errorf("line %d: payload keys must be text; this key is a %s", k.Line, kind)
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("line %d: payload has no JSON form: %v", n.Line, err)
	}
	*p = b
	return nil
}

// nonScalarKey returns the first mapping key under n (through aliases)
// that is a list or a map, or nil.
func nonScalarKey(n *yaml.Node, seen map[*yaml.Node]bool) *yaml.Node {
	if n == nil || seen[n] {
		return nil
	}
	seen[n] = true
	if n.Kind == yaml.AliasNode {
		return nonScalarKey(n.Alias, seen)
	}
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && unalias(c).Kind != yaml.ScalarNode {
			return c
		}
		if k := nonScalarKey(c, seen); k != nil {
			return k
		}
	}
	return nil
}

// unalias is the node an alias stands for, or n itself.
func unalias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// MarshalYAML writes the payload as the YAML form of its JSON.
func (p Payload) MarshalYAML() (any, error) {
	if len(p) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(p, &v); err != nil {
		return string(p), nil
	}
	return v, nil
}

// Has reports whether the document sets the field at path.
func (d *Document) Has(path string) bool { return d.root != nil && lookup(d.root, path) != nil }
