package expr

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// What an expression builds is sized before it is built. CEL charges a
// call to the cost limit once its result exists, so the limit alone does
// not bound memory: a 40,000-byte string replacing each of its own
// characters built 1.6 GB before the limit stopped it. Every overload the
// environment offers is in one of two tables (TestEveryFunctionIsSized
// keeps them complete): sized, whose result may outgrow its arguments and
// whose arguments are measured first, the call refused when the result
// would pass MaxBuild or MaxBuildItems; or unsized, with the reason its
// result cannot outgrow them. What a call builds is charged to the cost
// limit at a unit a byte (buildCost, whatever overload the call resolves
// to at run time: a dyn operand's + has none until then), which bounds
// what one evaluation builds in all; a regular expression's match is
// charged by its work, and one that would take more than MaxMatchWork is
// refused before it runs.

// Bounds of what one call of an expression builds.
const (
	// MaxBuild bounds a string or bytes value one call builds.
	MaxBuild = 1 << 20
	// MaxBuildItems bounds a list one call builds (split).
	MaxBuildItems = 100_000
	// MaxPatternInsts bounds a regular expression's program (matches):
	// about 40 bytes an instruction; a{1000} is a thousand.
	MaxPatternInsts = 20_000
	// MaxMatchWork bounds one match's work: its program's instructions
	// times the bytes matched (about 10 ns a step here, so 0.2 s).
	MaxMatchWork = 20_000_000
	// matchWorkPerCost is the match work one cost unit pays for: five
	// matches at MaxMatchWork reach CostLimit.
	matchWorkPerCost = MaxMatchWork / (CostLimit / 5)
)

// A sizer measures what an overload would build from its arguments
// (receiver first) and returns "" or why it may not.
type sizer func(args []ref.Val) string

// sized are the overloads whose result may outgrow their arguments.
var sized = map[string]sizer{
	"string_replace_string_string":     sizeReplace,
	"string_replace_string_string_int": sizeReplace,
	"list_join":                        sizeJoin,
	"list_join_string":                 sizeJoin,
	"string_split_string":              sizeSplit,
	"string_split_string_int":          sizeSplit,
	"strings_quote":                    sizeQuote,
	// The operators below are one binding for all their overloads
	// (sizedOperators).
	overloads.AddString:     sizeAdd,
	overloads.AddBytes:      sizeAdd,
	overloads.Matches:       sizeMatch,
	overloads.MatchesString: sizeMatch,
}

// unsized are the overloads whose result cannot outgrow their arguments,
// by the reason it cannot.
var unsized = map[string][]string{
	"a scalar (bool, int, uint, double, timestamp, duration, type) or a short string of one": {
		"logical_not", "negate_double", "negate_int64", "in_list", "in_map", "not_strictly_false", "__not_strictly_false__",
		"not_equals", "equals", "modulo_int64", "modulo_uint64", "logical_and", "logical_or",
		"multiply_double", "multiply_int64", "multiply_uint64", "add_double", "add_int64", "add_uint64",
		"add_duration_duration", "add_duration_timestamp", "add_timestamp_duration",
		"subtract_double", "subtract_duration_duration", "subtract_int64", "subtract_timestamp_duration",
		"subtract_timestamp_timestamp", "subtract_uint64", "divide_double", "divide_int64", "divide_uint64",
		"bool_to_bool", "string_to_bool", "contains_string", "ends_with_string", "starts_with_string",
		"double_to_double", "int64_to_double", "string_to_double", "uint64_to_double",
		"duration_to_duration", "string_to_duration", "int64_to_int64", "double_to_int64", "duration_to_int64",
		"string_to_int64", "timestamp_to_int64", "uint64_to_int64", "double_to_uint64", "int64_to_uint64",
		"string_to_uint64", "uint64_to_uint64", "int64_to_timestamp", "string_to_timestamp", "timestamp_to_timestamp",
		"string_index_of_string", "string_index_of_string_int", "string_last_index_of_string", "string_last_index_of_string_int",
		"bytes_size", "list_size", "map_size", "size_bytes", "size_list", "size_map", "size_string", "string_size",
		"bool_to_string", "double_to_string", "duration_to_string", "int64_to_string", "timestamp_to_string", "uint64_to_string",
		"string_char_at_int", "type",
		"timestamp_to_day_of_month_1_based", "timestamp_to_day_of_month_1_based_with_tz",
		"timestamp_to_day_of_month", "timestamp_to_day_of_month_with_tz", "timestamp_to_day_of_week",
		"timestamp_to_day_of_week_with_tz", "timestamp_to_day_of_year", "timestamp_to_day_of_year_with_tz",
		"timestamp_to_year", "timestamp_to_year_with_tz", "duration_to_hours", "timestamp_to_hours",
		"timestamp_to_hours_with_tz", "duration_to_milliseconds", "timestamp_to_milliseconds",
		"timestamp_to_milliseconds_with_tz", "duration_to_minutes", "timestamp_to_minutes", "timestamp_to_minutes_with_tz",
		"timestamp_to_month", "timestamp_to_month_with_tz", "duration_to_seconds", "timestamp_to_seconds", "timestamp_to_seconds_tz",
	},
	"a comparison": {
		"less_bool", "less_bytes", "less_double", "less_double_int64", "less_double_uint64", "less_duration", "less_int64",
		"less_int64_double", "less_int64_uint64", "less_string", "less_timestamp", "less_uint64", "less_uint64_double", "less_uint64_int64",
		"less_equals_bool", "less_equals_bytes", "less_equals_double", "less_equals_double_int64", "less_equals_double_uint64",
		"less_equals_duration", "less_equals_int64", "less_equals_int64_double", "less_equals_int64_uint64", "less_equals_string",
		"less_equals_timestamp", "less_equals_uint64", "less_equals_uint64_double", "less_equals_uint64_int64",
		"greater_bool", "greater_bytes", "greater_double", "greater_double_int64", "greater_double_uint64", "greater_duration",
		"greater_int64", "greater_int64_double", "greater_int64_uint64", "greater_string", "greater_timestamp", "greater_uint64",
		"greater_uint64_double", "greater_uint64_int64", "greater_equals_bool", "greater_equals_bytes", "greater_equals_double",
		"greater_equals_double_int64", "greater_equals_double_uint64", "greater_equals_duration", "greater_equals_int64",
		"greater_equals_int64_double", "greater_equals_int64_uint64", "greater_equals_string", "greater_equals_timestamp",
		"greater_equals_uint64", "greater_equals_uint64_double", "greater_equals_uint64_int64",
	},
	"one of its arguments, or a part of one (no copy)": {
		"conditional", "index_list", "index_map", "to_dyn", "string_to_string", "bytes_to_bytes",
	},
	"a copy of its receiver, at most 3 times its bytes (an invalid byte becomes U+FFFD)": {
		"string_to_bytes", "bytes_to_string", "string_lower_ascii", "string_upper_ascii", "string_reverse",
		"string_trim", "string_substring_int", "string_substring_int_int",
	},
	"a list that refers to both lists, O(1) (CEL concatenates lists without copying)": {
		"add_list",
	},
	"refused at compile time (Env.reads)": {
		"string_format",
	},
}

// sizedOperators are the functions CEL binds once for all their overloads
// (a singleton: the dispatcher calls it whatever the overload), bound
// again with their sizers for each program (cel.Functions replaces a
// function's binding by name, which an overload-by-overload declaration
// cannot for these).
func sizedOperators() cel.ProgramOption {
	add := func(lhs, rhs ref.Val) ref.Val {
		if msg := sizeAdd([]ref.Val{lhs, rhs}); msg != "" {
			return types.NewErr("%s", msg)
		}
		return lhs.(traits.Adder).Add(rhs)
	}
	match := func(str, pat ref.Val) ref.Val {
		if msg := sizeMatch([]ref.Val{str, pat}); msg != "" {
			return types.NewErr("%s", msg)
		}
		return str.(traits.Matcher).Match(pat)
	}
	//lint:ignore SA1019 cel.Function cannot rebind a singleton function; the program's dispatcher can
	return cel.Functions(
		&functions.Overload{Operator: operators.Add, Binary: add, OperandTrait: traits.AdderType},
		&functions.Overload{Operator: overloads.Matches, Binary: match, OperandTrait: traits.MatcherType},
	)
}

// sizedOverloads declares again, with their sizers in front, the
// overloads of env that sized lists and that are bound one by one.
func sizedOverloads(env *cel.Env) ([]cel.EnvOption, error) {
	var opts []cel.EnvOption
	for name, f := range env.Functions() {
		bindings, err := f.Bindings()
		if err != nil {
			return nil, err
		}
		byID := make(map[string]*functions.Overload, len(bindings))
		for _, b := range bindings {
			byID[b.Operator] = b
		}
		for _, o := range f.OverloadDecls() {
			size, ok := sized[o.ID()]
			orig := byID[o.ID()]
			if !ok || orig == nil || o.ID() == name {
				continue // not sized, or bound by the function's name (sizedOperators)
			}
			bind := cel.FunctionBinding(func(args ...ref.Val) ref.Val {
				if msg := size(args); msg != "" {
					return types.NewErr("%s", msg)
				}
				return call(orig, args)
			})
			decl := cel.Overload
			if o.IsMemberFunction() {
				decl = cel.MemberOverload
			}
			opts = append(opts, cel.Function(name, decl(o.ID(), o.ArgTypes(), o.ResultType(), bind)))
		}
	}
	return opts, nil
}

func call(o *functions.Overload, args []ref.Val) ref.Val {
	switch {
	case len(args) == 1 && o.Unary != nil:
		return o.Unary(args[0])
	case len(args) == 2 && o.Binary != nil:
		return o.Binary(args[0], args[1])
	case o.Function != nil:
		return o.Function(args...)
	}
	return types.NewErr("no binding for overload %s", o.Operator)
}

func tooLarge(what string, n int64) string {
	return fmt.Sprintf("%s would build %d bytes; a value an expression builds is at most %d", what, n, MaxBuild)
}

func sizeReplace(args []ref.Val) string {
	s, old, new, ok := str3(args)
	if !ok {
		return ""
	}
	n := int64(-1)
	if len(args) == 4 {
		if i, isInt := args[3].(types.Int); isInt {
			n = int64(i)
		}
	}
	var count int64
	switch {
	case n == 0 || len(new) <= len(old):
		return "" // no larger than s
	case old == "":
		count = int64(utf8.RuneCountInString(s)) + 1
	default:
		count = int64(strings.Count(s, old))
	}
	if n > 0 && n < count {
		count = n
	}
	if size := int64(len(s)) + count*int64(len(new)-len(old)); size > MaxBuild {
		return tooLarge("replace", size)
	}
	return ""
}

func str3(args []ref.Val) (a, b, c string, ok bool) {
	if len(args) < 3 {
		return "", "", "", false
	}
	x, ok1 := args[0].(types.String)
	y, ok2 := args[1].(types.String)
	z, ok3 := args[2].(types.String)
	return string(x), string(y), string(z), ok1 && ok2 && ok3
}

func sizeJoin(args []ref.Val) string {
	list, ok := args[0].(traits.Lister)
	if !ok {
		return ""
	}
	var sep int64
	if len(args) == 2 {
		if s, ok := args[1].(types.String); ok {
			sep = int64(len(s))
		}
	}
	n, ok := list.Size().(types.Int)
	if !ok || n == 0 {
		return ""
	}
	size := int64(n-1) * sep
	if size > MaxBuild {
		return tooLarge("join", size)
	}
	for i := types.Int(0); i < n; i++ {
		if s, ok := list.Get(i).(types.String); ok {
			if size += int64(len(s)); size > MaxBuild { // measured no further
				return fmt.Sprintf("join would build more than %d bytes (%d of its %d items make %d); a value an expression builds is at most %d",
					MaxBuild, i+1, n, size, MaxBuild)
			}
		}
	}
	return ""
}

func sizeSplit(args []ref.Val) string {
	if len(args) < 2 {
		return ""
	}
	s, ok1 := args[0].(types.String)
	sep, ok2 := args[1].(types.String)
	if !ok1 || !ok2 {
		return ""
	}
	var parts int64
	if sep == "" {
		parts = int64(utf8.RuneCountInString(string(s)))
	} else {
		parts = int64(strings.Count(string(s), string(sep))) + 1
	}
	if len(args) == 3 {
		if n, ok := args[2].(types.Int); ok && n >= 0 && int64(n) < parts {
			parts = int64(n)
		}
	}
	if parts > MaxBuildItems {
		return fmt.Sprintf("split would build a list of %d items; a list an expression builds is at most %d", parts, MaxBuildItems)
	}
	return ""
}

func sizeQuote(args []ref.Val) string {
	s, ok := args[0].(types.String)
	if !ok || 3*len(s)+2 <= MaxBuild {
		return ""
	}
	size := int64(2)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(string(s[i:]))
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			size += 3
		case strings.ContainsRune("\a\b\f\n\r\t\v\\\"", r):
			size += 2
		default:
			size += int64(n)
		}
	}
	if size > MaxBuild {
		return tooLarge("strings.quote", size)
	}
	return ""
}

func sizeAdd(args []ref.Val) string {
	var size int
	switch l := args[0].(type) {
	case types.String:
		r, ok := args[1].(types.String)
		if !ok {
			return ""
		}
		size = len(l) + len(r)
	case types.Bytes:
		r, ok := args[1].(types.Bytes)
		if !ok {
			return ""
		}
		size = len(l) + len(r)
	}
	if size > MaxBuild {
		return tooLarge("+", int64(size))
	}
	return ""
}

// sizeMatch measures the program a pattern compiles to (regexp/syntax's
// parse is linear in the pattern; a counted repetition multiplies what it
// repeats when compiled).
func sizeMatch(args []ref.Val) string {
	pat, ok := args[1].(types.String)
	if !ok {
		return ""
	}
	if msg := sizePattern(string(pat)); msg != "" {
		return msg
	}
	if s, ok := args[0].(types.String); ok {
		if work := matchWork(string(pat), len(s)); work > MaxMatchWork {
			return fmt.Sprintf("matches would take about %d steps (a pattern of about %d instructions over %d bytes); a match takes at most %d",
				work, work/int64(max(len(s), 1)), len(s), MaxMatchWork)
		}
	}
	return ""
}

// matchWork estimates a match's steps: the pattern's instructions times
// the bytes matched (RE2 is linear in both); 0 for a pattern that does not
// parse (matches says what is wrong with it).
func matchWork(pat string, n int) int64 {
	re, err := syntax.Parse(pat, syntax.Perl)
	if err != nil {
		return 0
	}
	return insts(re) * int64(max(n, 1))
}

// sizedRegexConstants compile a pattern written out once, when the
// program is planned, as CEL's own optimization does, and measure each
// match's work before it runs (CEL's would run it unmeasured: it calls no
// binding). By overload id, which take precedence over CEL's by name.
func sizedRegexConstants() cel.ProgramOption {
	factory := func(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return nil, err
		}
		return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(values ...ref.Val) ref.Val {
			if len(values) != 2 {
				return types.NoSuchOverloadErr()
			}
			in, ok := values[0].(types.String)
			if !ok {
				return types.NoSuchOverloadErr()
			}
			if msg := sizeMatch(values); msg != "" {
				return types.NewErr("%s", msg)
			}
			return types.Bool(re.MatchString(string(in)))
		}), nil
	}
	return cel.OptimizeRegex(
		&interpreter.RegexOptimization{Function: overloads.Matches, OverloadID: overloads.MatchesString, RegexIndex: 1, Factory: factory},
		&interpreter.RegexOptimization{Function: overloads.Matches, OverloadID: overloads.Matches, RegexIndex: 1, Factory: factory},
	)
}

// buildCost charges, at run time, what calls build, whatever overload
// they resolve to (a cel.ActualCostEstimator): a string or bytes built by
// + or a conversion, a unit a byte; a match, a unit for matchWorkPerCost
// steps. Others take CEL's own costs.
type buildCost struct{}

func (buildCost) CallCost(function, _ string, args []ref.Val, result ref.Val) *uint64 {
	var n uint64
	switch function {
	case operators.Add, overloads.TypeConvertString, overloads.TypeConvertBytes:
		switch r := result.(type) {
		case types.String:
			n = uint64(len(r))
		case types.Bytes:
			n = uint64(len(r))
		default:
			return nil
		}
	case overloads.Matches:
		if len(args) != 2 {
			return nil
		}
		s, ok1 := args[0].(types.String)
		pat, ok2 := args[1].(types.String)
		if !ok1 || !ok2 {
			return nil
		}
		if work := matchWork(string(pat), len(s)); work <= MaxMatchWork { // (past it, refused: it did not run)
			n = uint64(work / matchWorkPerCost)
		}
	default:
		return nil
	}
	n = max(n, 1)
	return &n
}

// sizePattern is sizeMatch's measure of one pattern. A pattern written
// out in an expression is measured when it is compiled (Env.reads): CEL
// compiles such a pattern once, when it plans the program.
func sizePattern(pat string) string {
	if len(pat) > MaxPatternInsts {
		return fmt.Sprintf("matches: the pattern is %d bytes; a pattern compiles to at most %d instructions", len(pat), MaxPatternInsts)
	}
	re, err := syntax.Parse(pat, syntax.Perl)
	if err != nil {
		return "" // matches says what is wrong with it
	}
	if n := insts(re); n > MaxPatternInsts {
		return fmt.Sprintf("matches: the pattern would compile to about %d instructions; at most %d", n, MaxPatternInsts)
	}
	return ""
}

// insts estimates the instructions re compiles to, from above, stopping
// once past MaxPatternInsts.
func insts(re *syntax.Regexp) int64 {
	var n int64 = 1
	for _, sub := range re.Sub {
		if n += insts(sub); n > MaxPatternInsts {
			return n
		}
	}
	switch re.Op {
	case syntax.OpLiteral:
		n += int64(len(re.Rune))
	case syntax.OpRepeat:
		times := int64(re.Max)
		if times < 0 {
			times = int64(re.Min) + 1
		}
		n *= max(times, 1)
	}
	return n
}
