package crdbparse

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"
	"github.com/cockroachdb/errors"
)

// root is the Orrery repository, two levels up from this module.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(r, "go.mod"))
	if err != nil || !strings.Contains(string(mod), "module github.com/orrery-dev/orrery\n") {
		t.Fatalf("%s is not the Orrery repository (run from tools/crdbparse): %v", r, err)
	}
	return r
}

var blanks = regexp.MustCompile(`\s+`)

func exceptionFor(s Statement) (int, bool) {
	key := s.Name
	if key == "" {
		key = blanks.ReplaceAllString(s.SQL, " ")
	}
	for i, e := range Exceptions {
		if e.File == s.File && e.Query == key {
			return i, true
		}
	}
	return 0, false
}

// TestCockroachDBParsesEverything parses every statement Orrery sends with
// CockroachDB's parser: the goose Up statements of the migrations and the
// sqlc queries, with $N placeholders.
func TestCockroachDBParsesEverything(t *testing.T) {
	r := root(t)
	src, err := ReadSQLCConfig(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Migrations) == 0 || len(src.Queries) == 0 {
		t.Fatalf("sqlc.yaml names no migrations (%d) or no queries (%d)", len(src.Migrations), len(src.Queries))
	}

	var stmts []Statement
	for _, f := range src.Migrations {
		text, err := os.ReadFile(filepath.Join(r, f))
		if err != nil {
			t.Fatal(err)
		}
		s, err := GooseUp(f, string(text))
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, s...)
	}
	nMigration := len(stmts)
	for _, f := range src.Queries {
		text, err := os.ReadFile(filepath.Join(r, f))
		if err != nil {
			t.Fatal(err)
		}
		s, err := SQLCQueries(f, string(text))
		if err != nil {
			t.Fatal(err)
		}
		if len(s) == 0 {
			t.Errorf("%s: no named queries", f)
		}
		stmts = append(stmts, s...)
	}

	used := make([]bool, len(Exceptions))
	failed := 0
	for _, s := range stmts {
		parsed, err := parser.Parse(s.SQL)
		if err == nil && len(parsed) != 1 {
			err = fmt.Errorf("parsed into %d statements, want 1", len(parsed))
		}
		if err == nil && parsed[0].NumPlaceholders != len(s.Params) {
			err = fmt.Errorf("%d placeholders parsed, %d sqlc parameters (%v)", parsed[0].NumPlaceholders, len(s.Params), s.Params)
		}
		i, excepted := exceptionFor(s)
		switch {
		case err != nil && excepted:
			used[i] = true
			e := Exceptions[i]
			if e.Fix != "" {
				t.Logf("KNOWN BROKEN on CockroachDB (allow-listed in allowlist.go): %s: %v\n    on CockroachDB: %s\n    fix: %s", s.Where(), err, e.CockroachDB, e.Fix)
			} else {
				t.Logf("allowed (allowlist.go): %s: %v\n    on CockroachDB: %s", s.Where(), err, e.CockroachDB)
			}
		case err != nil:
			failed++
			msg := err.Error()
			if d := errors.FlattenDetails(err); d != "" {
				msg += "\n" + d
			}
			if h := errors.FlattenHints(err); h != "" {
				msg += "\nHINT: " + h
			}
			t.Errorf("%s: CockroachDB cannot parse it: %s\n--- statement sent:\n%s", s.Where(), msg, s.SQL)
		case excepted:
			used[i] = true
			t.Errorf("%s: parses now; remove its entry from Exceptions (allowlist.go)", s.Where())
		}
	}
	for i, e := range Exceptions {
		if !used[i] {
			t.Errorf("exception for %s %q matches no statement: remove it from allowlist.go", e.File, e.Query)
		}
	}
	var usedNames []string
	for i, e := range Exceptions {
		if used[i] {
			usedNames = append(usedNames, fmt.Sprintf("%s %q", e.File, e.Query))
		}
	}
	t.Logf("parsed %d migration statements (%d files) and %d queries (%d files) with cockroachdb-parser; %d failed outside the allow-list; %d allow-listed exceptions used: %s",
		nMigration, len(src.Migrations), len(stmts)-nMigration, len(src.Queries), failed, len(usedNames), strings.Join(usedNames, ", "))
}

func TestToPositional(t *testing.T) {
	for _, c := range []struct {
		in, want string
		params   []string
	}{
		{"SELECT * FROM t WHERE a = @a AND b = @b AND c = @a", "SELECT * FROM t WHERE a = $1 AND b = $2 AND c = $1", []string{"a", "b"}},
		{"SET x = sqlc.narg(src)::jsonb, y = sqlc.arg('y'), z = SQLC.SLICE ( ids )", "SET x = $1::jsonb, y = $2, z = $3", []string{"src", "y", "ids"}},
		{"WHERE labels @> @labels::jsonb AND s = 'a@b' || \"q@x\"", "WHERE labels @> $1::jsonb AND s = 'a@b' || \"q@x\"", []string{"labels"}},
		{"SELECT 1 -- up to @max\n, $$ @no $$, E'\\'@no', 'it''s @no', @yes /* @no */", "SELECT 1 -- up to @max\n, $$ @no $$, E'\\'@no', 'it''s @no', $1 /* @no */", []string{"yes"}},
		{"SELECT sqlc.narg(a), @a", "SELECT $1, $1", []string{"a"}},
	} {
		got, params, err := ToPositional(c.in)
		if err != nil || got != c.want || !slices.Equal(params, c.params) {
			t.Errorf("ToPositional(%q) = %q, %v, %v; want %q, %v", c.in, got, params, err, c.want, c.params)
		}
	}
}

func TestGooseUp(t *testing.T) {
	const m = `-- header
-- +goose Up
-- about t
CREATE TABLE t (a INT); -- trailing
INSERT INTO t
VALUES (1);
-- +goose StatementBegin
CREATE FUNCTION f() RETURNS INT AS $$ SELECT 1; $$ LANGUAGE SQL;
-- +goose StatementEnd

-- +goose Down
DROP TABLE t;
`
	got, err := GooseUp("m.sql", m)
	if err != nil {
		t.Fatal(err)
	}
	want := []Statement{
		{File: "m.sql", Line: 4, SQL: "CREATE TABLE t (a INT); -- trailing"},
		{File: "m.sql", Line: 5, SQL: "INSERT INTO t\nVALUES (1)"},
		{File: "m.sql", Line: 8, SQL: "CREATE FUNCTION f() RETURNS INT AS $$ SELECT 1; $$ LANGUAGE SQL"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d statements %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].File != want[i].File || got[i].Line != want[i].Line || got[i].SQL != want[i].SQL {
			t.Errorf("statement %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSQLCQueries(t *testing.T) {
	const f = `-- name: A :one
SELECT @x::int;

-- B's comment mentions @notaparam and "shard@epoch".
-- name: B :exec
UPDATE t SET a = sqlc.narg(a) WHERE id = @id;
`
	got, err := SQLCQueries("q.sql", f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "A" || got[0].SQL != "-- name: A\nSELECT $1::int" ||
		got[1].Name != "B" || got[1].SQL != "-- name: B\nUPDATE t SET a = $1 WHERE id = $2" || !slices.Equal(got[1].Params, []string{"a", "id"}) {
		t.Errorf("got %+v", got)
	}
	if _, err := SQLCQueries("q.sql", "-- name: A :one\nSELECT 1; SELECT 2;\n"); err == nil {
		t.Error("two statements under one name: no error")
	}
}
