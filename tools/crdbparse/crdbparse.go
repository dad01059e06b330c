// Package crdbparse finds every SQL statement Orrery sends to its database
// (the goose Up sections of the migrations and the sqlc queries, with
// sqlc's named parameters turned into positional ones as sqlc sends them),
// so that a test can parse each one with CockroachDB's own parser.
//
// It is a module of its own (tools/crdbparse/go.mod) so that the parser's
// large dependency graph never enters Orrery's go.mod.
package crdbparse

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Statement is one SQL statement as Orrery sends it.
type Statement struct {
	File   string   // path relative to the repository root
	Line   int      // 1-based line of the statement's first line in File
	Name   string   // sqlc query name; "" for a migration statement
	SQL    string   // the text sent: positional placeholders, no trailing semicolon
	Params []string // sqlc parameter names in placeholder order ($1 is Params[0])
}

// Where names the statement in a report.
func (s Statement) Where() string {
	if s.Name != "" {
		return fmt.Sprintf("%s:%d (query %s)", s.File, s.Line, s.Name)
	}
	return fmt.Sprintf("%s:%d", s.File, s.Line)
}

// Sources are the SQL files sqlc.yaml names: the schema directories (goose
// migrations) and the query directories, relative to the repository root.
type Sources struct {
	Migrations []string
	Queries    []string
}

// ReadSQLCConfig reads root/sqlc.yaml and lists the .sql files of every
// schema and queries entry, so that a query directory added there is
// covered without touching this tool.
func ReadSQLCConfig(root string) (Sources, error) {
	raw, err := os.ReadFile(filepath.Join(root, "sqlc.yaml"))
	if err != nil {
		return Sources{}, err
	}
	var cfg struct {
		SQL []struct {
			Schema  stringList `yaml:"schema"`
			Queries stringList `yaml:"queries"`
		} `yaml:"sql"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return Sources{}, fmt.Errorf("sqlc.yaml: %w", err)
	}
	var src Sources
	seen := map[string]bool{}
	add := func(dst *[]string, p string) error {
		files, err := sqlFiles(root, p)
		if err != nil {
			return err
		}
		for _, f := range files {
			if !seen[f] {
				seen[f] = true
				*dst = append(*dst, f)
			}
		}
		return nil
	}
	for _, e := range cfg.SQL {
		for _, p := range e.Schema {
			if err := add(&src.Migrations, p); err != nil {
				return Sources{}, err
			}
		}
		for _, p := range e.Queries {
			if err := add(&src.Queries, p); err != nil {
				return Sources{}, err
			}
		}
	}
	return src, nil
}

// stringList accepts sqlc's "a" or ["a", "b"].
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = []string{n.Value}
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*l = s
	return nil
}

// sqlFiles lists p itself if it is a file, else its *.sql files, sorted.
func sqlFiles(root, p string) ([]string, error) {
	fi, err := os.Stat(filepath.Join(root, p))
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{filepath.ToSlash(filepath.Clean(p))}, nil
	}
	matches, err := filepath.Glob(filepath.Join(root, p, "*.sql"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range matches {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			return nil, err
		}
		out = append(out, filepath.ToSlash(rel))
	}
	sort.Strings(out)
	return out, nil
}

// GooseUp splits a goose SQL migration the way goose does and returns the
// statements of its Up section: a statement ends at a line whose last word
// before any "--" comment ends with ";", except between
// "-- +goose StatementBegin" and "-- +goose StatementEnd", which enclose one
// statement; comment lines before a statement are dropped.
func GooseUp(file, text string) ([]Statement, error) {
	const (
		start = iota
		up
		upBlock
		down
	)
	state := start
	var (
		stmts     []Statement
		buf       strings.Builder
		firstLine int
	)
	emit := func() {
		sql := strings.TrimSpace(buf.String())
		buf.Reset()
		if sql == "" {
			return
		}
		stmts = append(stmts, Statement{File: file, Line: firstLine, SQL: trimSemicolon(sql)})
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") && strings.Contains(line, "+goose") {
			ann := strings.TrimSpace(strings.Replace(strings.ReplaceAll(trimmed, "--", ""), "+goose", "", 1))
			switch {
			case strings.EqualFold(ann, "Up"):
				if state != start {
					return nil, fmt.Errorf("%s:%d: duplicate or misplaced '-- +goose Up'", file, n)
				}
				state = up
			case strings.EqualFold(ann, "Down"):
				if state == upBlock {
					return nil, fmt.Errorf("%s:%d: '-- +goose Down' inside a StatementBegin block", file, n)
				}
				if state == up && strings.TrimSpace(buf.String()) != "" {
					return nil, fmt.Errorf("%s:%d: unfinished statement before '-- +goose Down' (missing semicolon?)", file, n)
				}
				state = down
			case strings.EqualFold(ann, "StatementBegin"):
				switch state {
				case up:
					if strings.TrimSpace(buf.String()) != "" {
						return nil, fmt.Errorf("%s:%d: unfinished statement before StatementBegin", file, n)
					}
					state = upBlock
				case down:
					// Down sections are not parsed.
				default:
					return nil, fmt.Errorf("%s:%d: StatementBegin outside an Up or Down section", file, n)
				}
			case strings.EqualFold(ann, "StatementEnd"):
				if state == upBlock {
					emit()
					state = up
				} else if state != down {
					return nil, fmt.Errorf("%s:%d: StatementEnd without StatementBegin", file, n)
				}
			case strings.EqualFold(ann, "NO TRANSACTION"), strings.EqualFold(ann, "ENVSUB ON"), strings.EqualFold(ann, "ENVSUB OFF"):
				// No effect on the statements' text (ENVSUB would
				// substitute ${VARS}; Orrery's migrations use none).
			default:
				return nil, fmt.Errorf("%s:%d: unknown goose annotation %q", file, n, ann)
			}
			continue
		}
		if state != up && state != upBlock {
			continue
		}
		if buf.Len() == 0 {
			if trimmed == "" || strings.HasPrefix(trimmed, "--") {
				continue // comments and blank lines before a statement
			}
			firstLine = n
		}
		buf.WriteString(line)
		buf.WriteByte('\n')
		if state == up && endsWithSemicolon(line) {
			emit()
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch state {
	case start:
		return nil, fmt.Errorf("%s: no '-- +goose Up' annotation", file)
	case upBlock:
		return nil, fmt.Errorf("%s: missing '-- +goose StatementEnd'", file)
	}
	if rest := strings.TrimSpace(buf.String()); rest != "" {
		return nil, fmt.Errorf("%s:%d: unfinished statement at the end of the Up section (missing semicolon?)", file, firstLine)
	}
	return stmts, nil
}

// endsWithSemicolon is goose's test: the last whitespace-separated word
// before a word starting with "--" ends with ";".
func endsWithSemicolon(line string) bool {
	prev := ""
	for _, w := range strings.Fields(line) {
		if strings.HasPrefix(w, "--") {
			break
		}
		prev = w
	}
	return strings.HasSuffix(prev, ";")
}

func trimSemicolon(s string) string {
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), ";"))
}

// SQLCQueries splits a sqlc query file into its named queries ("-- name:
// X :kind" comments) and rewrites each one's parameters to $N.
func SQLCQueries(file, text string) ([]Statement, error) {
	lines := strings.Split(text, "\n")
	var (
		stmts []Statement
		cur   *Statement
		body  []string
	)
	finish := func() error {
		if cur == nil {
			return nil
		}
		q, err := cutAtSemicolon(strings.Join(body, "\n"))
		if err != nil {
			return fmt.Errorf("%s: %w", cur.Where(), err)
		}
		if strings.TrimSpace(stripComments(q)) == "" {
			return fmt.Errorf("%s: empty query", cur.Where())
		}
		sql, params, err := ToPositional(q)
		if err != nil {
			return fmt.Errorf("%s: %w", cur.Where(), err)
		}
		// sqlc keeps the "-- name:" comment at the head of the text it sends.
		cur.SQL = fmt.Sprintf("-- name: %s\n%s", cur.Name, strings.TrimSpace(sql))
		cur.Params = params
		stmts = append(stmts, *cur)
		cur, body = nil, nil
		return nil
	}
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(trimmed, "-- name:"); ok {
			if err := finish(); err != nil {
				return nil, err
			}
			f := strings.Fields(rest)
			if len(f) < 2 || !strings.HasPrefix(f[1], ":") {
				return nil, fmt.Errorf("%s:%d: malformed %q", file, i+1, trimmed)
			}
			cur = &Statement{File: file, Line: i + 1, Name: f[0]}
			continue
		}
		if cur != nil {
			body = append(body, line)
		} else if trimmed != "" && !strings.HasPrefix(trimmed, "--") {
			return nil, fmt.Errorf("%s:%d: SQL outside a named query", file, i+1)
		}
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return stmts, nil
}

// cutAtSemicolon returns q up to its first top-level ";" and fails when
// anything but comments and blanks follows it (sqlc allows one statement
// per name; comments after it belong to the next query's header).
func cutAtSemicolon(q string) (string, error) {
	var cut = -1
	err := scan(q, func(i int, k tokenKind) bool {
		if k == tokCode && q[i] == ';' {
			cut = i
			return false
		}
		return true
	})
	if err != nil {
		return "", err
	}
	if cut < 0 {
		return "", errors.New("query does not end with ';'")
	}
	if rest := strings.TrimSpace(stripComments(q[cut+1:])); rest != "" {
		return "", fmt.Errorf("more than one statement (after ';': %.40q)", rest)
	}
	return q[:cut], nil
}

// stripComments drops -- and /* */ comments outside literals.
func stripComments(q string) string {
	var b strings.Builder
	_ = scan(q, func(i int, k tokenKind) bool {
		if k != tokComment {
			b.WriteByte(q[i])
		}
		return true
	})
	return b.String()
}

// ToPositional rewrites sqlc's parameters, @name, sqlc.arg(name),
// sqlc.narg(name) and sqlc.slice(name), to $1, $2, … in order of first
// appearance, one number per name, as sqlc does for PostgreSQL. Text in
// string literals, quoted identifiers, dollar-quoted strings and comments
// is left alone ('@' in "shard@epoch" is no parameter; neither is the
// jsonb operator @>).
func ToPositional(q string) (string, []string, error) {
	var (
		b      strings.Builder
		params []string
		index  = map[string]int{}
		skip   = 0
	)
	number := func(name string) int {
		if n, ok := index[name]; ok {
			return n
		}
		params = append(params, name)
		index[name] = len(params)
		return len(params)
	}
	var rerr error
	err := scan(q, func(i int, k tokenKind) bool {
		if skip > 0 {
			skip--
			return true
		}
		if k != tokCode {
			b.WriteByte(q[i])
			return true
		}
		if name, n, ok, err := sqlcFunc(q[i:]); err != nil {
			rerr = err
			return false
		} else if ok && !identByte(prevByte(q, i)) {
			fmt.Fprintf(&b, "$%d", number(name))
			skip = n - 1
			return true
		}
		if q[i] == '@' && i+1 < len(q) && identStart(q[i+1]) && !identByte(prevByte(q, i)) {
			j := i + 1
			for j < len(q) && identByte(q[j]) {
				j++
			}
			fmt.Fprintf(&b, "$%d", number(q[i+1:j]))
			skip = j - i - 1
			return true
		}
		b.WriteByte(q[i])
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return "", nil, err
	}
	return b.String(), params, nil
}

// sqlcFunc matches sqlc.arg(name), sqlc.narg(name) or sqlc.slice(name) at
// the start of s (case-insensitive, optional blanks, name bare or quoted)
// and returns the name and the length matched.
func sqlcFunc(s string) (name string, n int, ok bool, err error) {
	if len(s) < 5 || !strings.EqualFold(s[:5], "sqlc.") {
		return "", 0, false, nil
	}
	i := 5
	j := i
	for j < len(s) && identByte(s[j]) {
		j++
	}
	switch strings.ToLower(s[i:j]) {
	case "arg", "narg", "slice":
	default:
		return "", 0, false, nil
	}
	i = skipBlanks(s, j)
	if i >= len(s) || s[i] != '(' {
		return "", 0, false, fmt.Errorf("sqlc.%s without '('", s[5:j])
	}
	i = skipBlanks(s, i+1)
	end := strings.IndexByte(s[i:], ')')
	if end < 0 {
		return "", 0, false, fmt.Errorf("sqlc.%s without ')'", s[5:j])
	}
	name = strings.TrimSpace(s[i : i+end])
	name = strings.Trim(name, `'"`)
	if name == "" {
		return "", 0, false, fmt.Errorf("sqlc.%s() without a name", s[5:j])
	}
	return name, i + end + 1, true, nil
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

func prevByte(s string, i int) byte {
	if i == 0 {
		return ' '
	}
	return s[i-1]
}

func identStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func identByte(c byte) bool { return identStart(c) || c >= '0' && c <= '9' || c == '$' }

type tokenKind int

const (
	tokCode    tokenKind = iota // SQL outside the kinds below
	tokLiteral                  // '…', E'…', "…", $tag$…$tag$
	tokComment                  // -- … and /* … */
)

// scan calls f for every byte of q with the kind of text it belongs to,
// until f returns false. It knows PostgreSQL's lexical rules well enough to
// tell code from literals and comments.
func scan(q string, f func(i int, k tokenKind) bool) error {
	emit := func(from, to int, k tokenKind) bool {
		for i := from; i < to; i++ {
			if !f(i, k) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				end = len(q) - i
			}
			if !emit(i, i+end, tokComment) {
				return nil
			}
			i += end
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			depth, j := 1, i+2
			for j < len(q) && depth > 0 {
				switch {
				case strings.HasPrefix(q[j:], "/*"):
					depth++
					j += 2
				case strings.HasPrefix(q[j:], "*/"):
					depth--
					j += 2
				default:
					j++
				}
			}
			if depth > 0 {
				return errors.New("unterminated /* comment")
			}
			if !emit(i, j, tokComment) {
				return nil
			}
			i = j
		case c == '\'' || c == '"':
			// E'…' strings take backslash escapes.
			escapes := c == '\'' && i > 0 && (q[i-1] == 'e' || q[i-1] == 'E') && !identByte(prevByte(q, i-1))
			j := i + 1
			for {
				if j >= len(q) {
					return fmt.Errorf("unterminated %c literal", c)
				}
				if escapes && q[j] == '\\' {
					j += 2
					continue
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c { // doubled quote
						j += 2
						continue
					}
					j++
					break
				}
				j++
			}
			if !emit(i, j, tokLiteral) {
				return nil
			}
			i = j
		case c == '$' && !identByte(prevByte(q, i)):
			// $tag$…$tag$ (tag possibly empty); $1 is a placeholder.
			j := i + 1
			for j < len(q) && identByte(q[j]) && q[j] != '$' {
				j++
			}
			if j < len(q) && q[j] == '$' && (j == i+1 || identStart(q[i+1])) {
				tag := q[i : j+1]
				end := strings.Index(q[j+1:], tag)
				if end < 0 {
					return fmt.Errorf("unterminated %s string", tag)
				}
				stop := j + 1 + end + len(tag)
				if !emit(i, stop, tokLiteral) {
					return nil
				}
				i = stop
				continue
			}
			if !f(i, tokCode) {
				return nil
			}
			i++
		default:
			if !f(i, tokCode) {
				return nil
			}
			i++
		}
	}
	return nil
}
