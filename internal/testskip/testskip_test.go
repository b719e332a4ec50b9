package testskip

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestEverySkipGoesThroughTestskip lists the suite's skips: every call of a
// Skip method in the module's Go files must be testskip's own, so under CI
// no test can pass by skipping (the QEMU driver's whole conformance suite
// once did, for a kernel version pinned in its tests).
func TestEverySkipGoesThroughTestskip(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	// Doubles that stand in for testing.TB may call their own Skip.
	allowed := map[string]bool{
		"internal/testskip/testskip.go":    true,
		"internal/testenv/testenv_test.go": true,
	}
	var bare []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || name == ".git" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasSuffix(path, ".go") || allowed[rel] {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Skip", "Skipf", "SkipNow":
					if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "testskip" {
						bare = append(bare, fset.Position(call.Pos()).String())
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bare) > 0 {
		t.Fatalf("skips that would pass silently under CI (use testskip.Skip): %v", bare)
	}
}

// Under CI a skip is a failure; elsewhere it is a skip.
func TestSkip(t *testing.T) {
	for _, ci := range []string{"", "1"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			rec := &recordTB{TB: t}
			done := make(chan struct{})
			go func() { defer close(done); Skip(rec, "no %s", "qemu") }()
			<-done
			if rec.skipped == (ci != "") || rec.failed != (ci != "") {
				t.Fatalf("CI=%q: skipped=%v failed=%v", ci, rec.skipped, rec.failed)
			}
		})
	}
}

type recordTB struct {
	testing.TB
	skipped, failed bool
}

func (r *recordTB) Helper()               {}
func (r *recordTB) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *recordTB) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
