// Package resources is what a step needs and a worker has: a vector of
// CPU, memory, GPUs and named counts, written as Kubernetes writes
// quantities (500m, 2, 512Mi, 4Gi) and kept as integers (millicores,
// bytes, counts). It parses, bounds, adds and compares vectors, and
// computes a dominant share; it does no I/O (docs/resources.md).
package resources

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The names of the built-in resources.
const (
	CPU    = "cpu"
	Memory = "memory"
	GPU    = "gpu"
)

// Bounds of a vector: a step's or a worker's past them is refused.
const (
	MaxCPU         = 1024 * 1000 // millicores: 1,024 cores
	MaxMemory      = 16 << 40    // bytes: 16 TiB
	MaxGPU         = 64
	MaxCustomNames = 16
	MaxCustom      = 1_000_000
	maxNameLen     = 63
)

// Vector is a set of resources: CPU in millicores, memory in bytes, GPUs
// and named custom counts. The zero Vector asks for nothing.
type Vector struct {
	CPU    int64            `json:"cpu,omitempty"`
	Memory int64            `json:"memory,omitempty"`
	GPU    int64            `json:"gpu,omitempty"`
	Custom map[string]int64 `json:"custom,omitempty"` // no zero values; nil when none
}

// IsZero reports whether v asks for nothing.
func (v Vector) IsZero() bool {
	return v.CPU == 0 && v.Memory == 0 && v.GPU == 0 && len(v.Custom) == 0
}

// Add is v plus w.
func (v Vector) Add(w Vector) Vector {
	out := Vector{CPU: v.CPU + w.CPU, Memory: v.Memory + w.Memory, GPU: v.GPU + w.GPU}
	for name, n := range v.Custom {
		out.setCustom(name, n)
	}
	for name, n := range w.Custom {
		out.setCustom(name, out.Custom[name]+n)
	}
	return out
}

// Sub is v minus w (a resource may go below zero).
func (v Vector) Sub(w Vector) Vector {
	neg := Vector{CPU: -w.CPU, Memory: -w.Memory, GPU: -w.GPU}
	for name, n := range w.Custom {
		neg.setCustom(name, -n)
	}
	return v.Add(neg)
}

func (v *Vector) setCustom(name string, n int64) {
	if n == 0 {
		delete(v.Custom, name)
		return
	}
	if v.Custom == nil {
		v.Custom = map[string]int64{}
	}
	v.Custom[name] = n
}

// Names are the resources v holds (not zero), built-in ones first, then
// the custom ones by name.
func (v Vector) Names() []string {
	var out []string
	for _, r := range []struct {
		name string
		n    int64
	}{{CPU, v.CPU}, {Memory, v.Memory}, {GPU, v.GPU}} {
		if r.n != 0 {
			out = append(out, r.name)
		}
	}
	return append(out, slices.Sorted(maps.Keys(v.Custom))...)
}

// Get is the amount of one resource (0 for one v does not hold).
func (v Vector) Get(name string) int64 {
	switch name {
	case CPU:
		return v.CPU
	case Memory:
		return v.Memory
	case GPU:
		return v.GPU
	}
	return v.Custom[name]
}

// FitsIn reports whether v fits in room: every resource of v at most
// room's.
func (v Vector) FitsIn(room Vector) bool {
	return v.Shortfall(room) == ""
}

// Shortfall names the first resource of v past room's ("" when v fits).
func (v Vector) Shortfall(room Vector) string {
	for _, name := range v.Names() {
		if v.Get(name) > room.Get(name) {
			return name
		}
	}
	return ""
}

// Over names the first resource a quota names that v asks more of ("":
// none). A resource the quota does not name is not bounded by it: a
// quota, unlike a capacity, leaves out what it does not limit.
func (v Vector) Over(quota Vector) string {
	for _, name := range quota.Names() {
		if v.Get(name) > quota.Get(name) {
			return name
		}
	}
	return ""
}

// Field is the field path of a resource in a Spec: cpu, memory, gpu, or
// custom.NAME.
func Field(name string) string { return field(name) }

// DominantShare is the largest of v's shares of total, resource by
// resource (a resource total lacks counts as a whole share when v holds
// any of it): Dominant Resource Fairness's measure of an allocation.
func (v Vector) DominantShare(total Vector) float64 {
	share := 0.0
	for _, name := range v.Names() {
		t := total.Get(name)
		if t <= 0 {
			return 1
		}
		share = max(share, float64(v.Get(name))/float64(t))
	}
	return share
}

// Format writes one resource's amount as a user writes it: cpu in cores
// or millicores (2, 500m), memory in binary units where exact (512Mi,
// 4Gi), counts as numbers.
func Format(name string, n int64) string {
	switch name {
	case CPU:
		if n%1000 == 0 {
			return strconv.FormatInt(n/1000, 10)
		}
		return strconv.FormatInt(n, 10) + "m"
	case Memory:
		return resource.NewQuantity(n, resource.BinarySI).String()
	}
	return strconv.FormatInt(n, 10)
}

// String writes v as "cpu 500m, memory 512Mi, licence 1" ("nothing" for
// the zero vector).
func (v Vector) String() string {
	names := v.Names()
	if len(names) == 0 {
		return "nothing"
	}
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + " " + Format(name, v.Get(name))
	}
	return strings.Join(parts, ", ")
}

// Spec is a vector as a user writes it: each resource a quantity's text.
type Spec struct {
	CPU    string
	Memory string
	GPU    string
	Custom map[string]string
}

// FieldError is a mistake in one resource, named by its field (cpu,
// memory, gpu, custom.NAME).
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Bounds are the most a vector may hold of each resource (Custom: of
// each custom one).
type Bounds struct{ CPU, Memory, GPU, Custom int64 }

// StepBounds bound what one step asks for and what one worker has.
var StepBounds = Bounds{CPU: MaxCPU, Memory: MaxMemory, GPU: MaxGPU, Custom: MaxCustom}

// QuotaBounds bound a tenant's quota, over all its tasks at once: a
// thousand times what one step may ask.
var QuotaBounds = Bounds{CPU: 1000 * MaxCPU, Memory: 1000 * MaxMemory, GPU: 1000 * MaxGPU, Custom: 1000 * MaxCustom}

func (b Bounds) of(name string) int64 {
	switch name {
	case CPU:
		return b.CPU
	case Memory:
		return b.Memory
	case GPU:
		return b.GPU
	}
	return b.Custom
}

// Parse reads a Spec within StepBounds. An empty quantity is none of that
// resource.
func Parse(s Spec) (Vector, error) { return ParseWithin(s, StepBounds) }

// ParseWithin is Parse within other bounds.
func ParseWithin(s Spec, b Bounds) (Vector, error) {
	var v Vector
	var errs []error
	var err error
	if v.CPU, err = parse(CPU, s.CPU, b); err != nil {
		errs = append(errs, err)
	}
	if v.Memory, err = parse(Memory, s.Memory, b); err != nil {
		errs = append(errs, err)
	}
	if v.GPU, err = parse(GPU, s.GPU, b); err != nil {
		errs = append(errs, err)
	}
	if len(s.Custom) > MaxCustomNames {
		errs = append(errs, &FieldError{"custom", fmt.Sprintf("%d names; at most %d", len(s.Custom), MaxCustomNames)})
		return v, errors.Join(errs...)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Custom)) {
		if err := checkName(name); err != nil {
			errs = append(errs, &FieldError{"custom", err.Error()})
			continue
		}
		n, err := parse(name, s.Custom[name], b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v.setCustom(name, n)
	}
	return v, errors.Join(errs...)
}

// field is the field path of a resource in a Spec.
func field(name string) string {
	switch name {
	case CPU, Memory, GPU:
		return name
	}
	return "custom." + name
}

// parse reads one resource's quantity within its bound.
func parse(name, text string, b Bounds) (int64, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return 0, nil
	}
	fail := func(format string, args ...any) (int64, error) {
		return 0, &FieldError{field(name), fmt.Sprintf(format, args...)}
	}
	if len(text) > 32 {
		return fail("%d characters; a quantity is at most 32", len(text))
	}
	q, err := resource.ParseQuantity(text)
	if err != nil {
		return fail("%q is not a quantity such as %s", text, example(name))
	}
	if q.Sign() < 0 {
		return fail("%q is negative", text)
	}
	if name != CPU && name != Memory && strings.ContainsAny(text, "eEkMGTP") {
		return fail("%q is not a whole count such as 1", text) // a count takes no unit
	}
	// The bound first: a huge quantity is past it, whatever its form.
	bound := b.of(name)
	limit := resource.NewQuantity(bound, resource.DecimalSI)
	switch name {
	case CPU:
		limit = resource.NewMilliQuantity(bound, resource.DecimalSI)
	case Memory:
		limit = resource.NewQuantity(bound, resource.BinarySI)
	}
	if q.Cmp(*limit) > 0 {
		return fail("%q is past the bound of %s", text, Format(name, bound))
	}
	switch name {
	case CPU:
		// Millicores: 0.5 is 500m; a finer fraction is refused rather
		// than rounded up, as Kubernetes would, to say what is kept.
		m := q.ScaledValue(resource.Milli)
		if q.Cmp(*resource.NewMilliQuantity(m, resource.DecimalSI)) != 0 {
			return fail("%q is finer than a millicore (1m)", text)
		}
		return m, nil
	case Memory:
		// Whole bytes, however written: 1.5Gi is 1610612736.
		b := q.Value()
		if q.Cmp(*resource.NewQuantity(b, resource.BinarySI)) != 0 {
			return fail("%q is not a whole number of bytes", text)
		}
		return b, nil
	}
	c := q.Value()
	if q.Cmp(*resource.NewQuantity(c, resource.DecimalSI)) != 0 {
		return fail("%q is not a whole count such as 1", text)
	}
	return c, nil
}

func example(name string) string {
	switch name {
	case CPU:
		return "500m or 2"
	case Memory:
		return "512Mi or 4Gi"
	}
	return "1"
}

// checkName: a custom resource's name is a lower-case name as a step's
// (letters, digits, '-' and '_'), and not a built-in one.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("a custom resource has no name")
	case len(name) > maxNameLen:
		return fmt.Errorf("custom resource name of %d characters; at most %d", len(name), maxNameLen)
	case name == CPU || name == Memory || name == GPU:
		return fmt.Errorf("%s is not a custom resource; give it as %s", name, name)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' && i > 0 || (c == '-' || c == '_') && i > 0
		if !ok {
			return fmt.Errorf("%q is not a resource name (lower-case letters, digits, - and _, starting with a letter)", name)
		}
	}
	return nil
}

// ParseList reads a worker's capacity as a flag gives it:
// "cpu=16,memory=60Gi,gpu=2,licence=4" (names other than cpu, memory and
// gpu are custom counts).
func ParseList(s string) (Vector, error) {
	spec := Spec{}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, text, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return Vector{}, fmt.Errorf("%q is not NAME=QUANTITY (cpu=16,memory=60Gi)", part)
		}
		if seen[name] {
			return Vector{}, fmt.Errorf("%s is given twice", name)
		}
		seen[name] = true
		switch name {
		case CPU:
			spec.CPU = text
		case Memory:
			spec.Memory = text
		case GPU:
			spec.GPU = text
		default:
			if spec.Custom == nil {
				spec.Custom = map[string]string{}
			}
			spec.Custom[name] = text
		}
	}
	return Parse(spec)
}

// Spec writes v back as quantities.
func (v Vector) Spec() Spec {
	s := Spec{}
	if v.CPU != 0 {
		s.CPU = Format(CPU, v.CPU)
	}
	if v.Memory != 0 {
		s.Memory = Format(Memory, v.Memory)
	}
	if v.GPU != 0 {
		s.GPU = Format(GPU, v.GPU)
	}
	for name, n := range v.Custom {
		if s.Custom == nil {
			s.Custom = map[string]string{}
		}
		s.Custom[name] = Format(name, n)
	}
	return s
}

// FromColumns is a vector as the database keeps one: cpu, memory and gpu
// columns, and custom counts as a JSON object, or a JSON list of objects
// (an aggregate of several vectors: summed), or nothing. What cannot be
// read counts as none.
func FromColumns(cpu, memory, gpu int64, custom []byte) Vector {
	v := Vector{CPU: cpu, Memory: memory, GPU: gpu}
	if len(custom) == 0 {
		return v
	}
	var one map[string]int64
	if json.Unmarshal(custom, &one) == nil {
		return v.Add(Vector{Custom: one})
	}
	var each []map[string]int64
	_ = json.Unmarshal(custom, &each)
	for _, c := range each {
		v = v.Add(Vector{Custom: c})
	}
	return v
}
