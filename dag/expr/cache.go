package expr

import (
	"sort"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
)

// Building a CEL environment and checking and planning an expression cost
// about half a millisecond for a job's few expressions: more than a run of
// a step costs. Jobs that declare the same params share one environment,
// and an expression compiled once for such an environment is not compiled
// again (a worker compiles each job version it runs; a storm of 10,000
// jobs of one shape compiles one). Both caches are bounded, and cleared
// when full: simple, and rare.

// A compiled program takes tens of kilobytes for a short expression and
// about 225 KB for one of MaxSource: the caches hold at most maxEnvs
// environments (34 KB each) and maxPrograms programs of sources up to
// maxCachedSource bytes, tens of megabytes at most, whatever is sent to
// validate.
const (
	maxEnvs         = 256
	maxPrograms     = 2_000
	maxCachedSource = 512
)

type compiledKey struct {
	params string // the params' signature (paramsKey)
	src    string
	want   int // wantAny, wantBool, wantList
}

type compiledExpr struct {
	parsed *cel.Ast
	prg    cel.Program
}

var cache = struct {
	mu       sync.Mutex
	envs     map[string]*cel.Env
	programs map[compiledKey]compiledExpr
}{envs: map[string]*cel.Env{}, programs: map[compiledKey]compiledExpr{}}

// paramsKey is a signature of declared params: equal for equal
// declarations.
func paramsKey(params map[string]Type) string {
	parts := make([]string, 0, len(params))
	for name, t := range params {
		parts = append(parts, name+":"+string(t))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func cachedEnv(key string, build func() (*cel.Env, error)) (*cel.Env, error) {
	cache.mu.Lock()
	env, ok := cache.envs[key]
	cache.mu.Unlock()
	if ok {
		return env, nil
	}
	env, err := build()
	if err != nil {
		return nil, err
	}
	cache.mu.Lock()
	if len(cache.envs) >= maxEnvs {
		clear(cache.envs)
	}
	cache.envs[key] = env
	cache.mu.Unlock()
	return env, nil
}

func cachedProgram(k compiledKey) (compiledExpr, bool) {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	c, ok := cache.programs[k]
	return c, ok
}

func storeProgram(k compiledKey, c compiledExpr) {
	if len(k.src) > maxCachedSource {
		return
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if len(cache.programs) >= maxPrograms {
		clear(cache.programs)
	}
	cache.programs[k] = c
}
