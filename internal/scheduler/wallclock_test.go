package scheduler

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Firing must not depend on any node's wall clock (time
// comes from the database), so that a node whose clock is minutes off fires
// nothing early, late or twice. This test keeps it so: no code on the
// firing, leasing or execution paths reads the wall clock, except to
// measure durations on the monotonic clock where named below.
func TestNoWallClockOnTheFiringPath(t *testing.T) {
	allowed := map[string]string{
		"shard/lease.go": "lastOK: how long heartbeats have failed, on the monotonic clock",
	}
	roots := []string{"../../internal/scheduler", "../../internal/run", "../../internal/dispatch", "../../engine/worker",
		"../../internal/job", "../../engine/executor", "../../internal/node", "../../internal/watchdog", "../../shard", "../../dag"}
	fset := token.NewFileSet()
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			rel := strings.TrimPrefix(filepath.ToSlash(path), "../../")
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok || pkg.Name != "time" {
					return true
				}
				switch sel.Sel.Name {
				case "Now", "Since", "Until":
					if _, ok := allowed[rel]; !ok {
						t.Errorf("%s: time.%s reads this node's wall clock; take the time from the database", fset.Position(sel.Pos()), sel.Sel.Name)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
