package resources

import (
	"strings"
	"testing"
)

func TestParseQuantities(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want Vector
	}{
		{Spec{CPU: "500m", Memory: "512Mi"}, Vector{CPU: 500, Memory: 512 << 20}},
		{Spec{CPU: "2", Memory: "4Gi", GPU: "1"}, Vector{CPU: 2000, Memory: 4 << 30, GPU: 1}},
		{Spec{CPU: "0.25", Memory: "1G"}, Vector{CPU: 250, Memory: 1_000_000_000}},
		{Spec{Memory: "1.5Gi"}, Vector{Memory: 3 << 29}}, // whole bytes, however written
		{Spec{Memory: "0.5Mi"}, Vector{Memory: 512 << 10}},
		{Spec{CPU: "1024", Memory: "16Ti", GPU: "64"}, Vector{CPU: MaxCPU, Memory: MaxMemory, GPU: MaxGPU}},
		{Spec{GPU: "0", Custom: map[string]string{"licence": "1", "scratch-gb": "0"}}, Vector{Custom: map[string]int64{"licence": 1}}},
		{Spec{}, Vector{}},
	} {
		got, err := Parse(c.spec)
		if err != nil || got.String() != c.want.String() || got.CPU != c.want.CPU || got.Memory != c.want.Memory {
			t.Errorf("%+v: %v %v, want %v", c.spec, got, err, c.want)
		}
	}
}

// Every mistake names its field and says what a quantity is.
func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{CPU: "-1"}, `cpu: "-1" is negative`},
		{Spec{CPU: "1.0005"}, "cpu: \"1.0005\" is finer than a millicore"},
		{Spec{CPU: "2000"}, `cpu: "2000" is past the bound of 1024`},
		{Spec{CPU: "two"}, `cpu: "two" is not a quantity such as 500m or 2`},
		{Spec{Memory: "17Ti"}, `memory: "17Ti" is past the bound of 16Ti`},
		{Spec{Memory: "1e30"}, `memory: "1e30" is past the bound`},
		{Spec{Memory: "0.5"}, `memory: "0.5" is not a whole number of bytes`},
		{Spec{CPU: "1e400"}, `cpu: "1e400" is past the bound of 1024`},
		{Spec{Memory: "100Ei"}, `memory: "100Ei" is past the bound of 16Ti`},
		{Spec{Custom: map[string]string{"licence": "99999999999999999999"}}, `custom.licence: "99999999999999999999" is past the bound of 1000000`},
		{Spec{Memory: strings.Repeat("9", 40)}, "memory: 40 characters"},
		{Spec{GPU: "0.5"}, `gpu: "0.5" is not a whole count`},
		{Spec{GPU: "1k"}, `gpu: "1k" is not a whole count`},
		{Spec{GPU: "65"}, `gpu: "65" is past the bound of 64`},
		{Spec{Custom: map[string]string{"licence": "1Mi"}}, `custom.licence: "1Mi" is not a whole count`},
		{Spec{Custom: map[string]string{"licence": "2000000"}}, `custom.licence: "2000000" is past the bound of 1000000`},
		{Spec{Custom: map[string]string{"Licence": "1"}}, `custom: "Licence" is not a resource name`},
		{Spec{Custom: map[string]string{"cpu": "1"}}, "custom: cpu is not a custom resource"},
		{Spec{Custom: map[string]string{"": "1"}}, "custom: a custom resource has no name"},
		{Spec{Custom: manyNames(17)}, "custom: 17 names; at most 16"},
	} {
		_, err := Parse(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
	}
}

func manyNames(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m["r"+strings.Repeat("x", i)] = "1"
	}
	return m
}

func TestParseList(t *testing.T) {
	v, err := ParseList("cpu=16, memory=60Gi,gpu=2,licence=4")
	if err != nil || v.String() != "cpu 16, memory 60Gi, gpu 2, licence 4" {
		t.Errorf("ParseList: %v %v", v, err)
	}
	for in, want := range map[string]string{
		"cpu":              "not NAME=QUANTITY",
		"cpu=1,cpu=2":      "cpu is given twice",
		"memory=lots":      "memory: \"lots\" is not a quantity",
		"=1":               "not NAME=QUANTITY",
		"licence=1,Big=2":  "not a resource name",
		"cpu=1,memory=-1G": "memory: \"-1G\" is negative",
	} {
		if _, err := ParseList(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

func TestArithmetic(t *testing.T) {
	a := Vector{CPU: 500, Memory: 1 << 30, Custom: map[string]int64{"licence": 1}}
	b := Vector{CPU: 1500, GPU: 1, Custom: map[string]int64{"licence": 2, "db": 3}}
	sum := a.Add(b)
	if sum.String() != "cpu 2, memory 1Gi, gpu 1, db 3, licence 3" {
		t.Errorf("Add: %v", sum)
	}
	if back := sum.Sub(b); back.String() != a.String() || len(back.Custom) != 1 {
		t.Errorf("Sub: %v, want %v", back, a)
	}
	if !(Vector{}).IsZero() || a.IsZero() || !a.Sub(a).IsZero() {
		t.Error("IsZero")
	}
	capacity := Vector{CPU: 2000, Memory: 4 << 30, Custom: map[string]int64{"licence": 1}}
	if !a.FitsIn(capacity) || b.FitsIn(capacity) {
		t.Error("FitsIn")
	}
	if got := b.Shortfall(capacity); got != GPU {
		t.Errorf("Shortfall: %q", got)
	}
	if got := a.DominantShare(capacity); got != 1 { // its licence is the whole of it
		t.Errorf("DominantShare: %v", got)
	}
	if got := (Vector{CPU: 500}).DominantShare(capacity); got != 0.25 {
		t.Errorf("DominantShare of cpu alone: %v", got)
	}
	if got := b.DominantShare(capacity); got != 1 { // gpu the capacity has none of
		t.Errorf("DominantShare beyond the capacity: %v", got)
	}
}

func TestSpecRoundTrip(t *testing.T) {
	for _, text := range []string{"cpu=500m,memory=512Mi", "cpu=2,memory=1000M,gpu=1,licence=3", "memory=1500Mi"} {
		v, err := ParseList(text)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(v.Spec())
		if err != nil || back.String() != v.String() {
			t.Errorf("%s: %v %v", text, back, err)
		}
	}
}

// A tenant's quota bounds all its tasks at once: past what one step may
// ask, within its own bounds.
func TestQuotaBounds(t *testing.T) {
	if v, err := ParseWithin(Spec{CPU: "4096", Memory: "64Ti", GPU: "512"}, QuotaBounds); err != nil || v.CPU != 4096_000 || v.GPU != 512 {
		t.Fatalf("a quota of 4096 cores, 64Ti, 512 GPUs: %v %v", v, err)
	}
	if _, err := ParseWithin(Spec{CPU: "2000000"}, QuotaBounds); err == nil || !strings.Contains(err.Error(), `cpu: "2000000" is past the bound`) {
		t.Fatalf("a quota of 2,000,000 cores: %v", err)
	}
}
