package sandbox

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The lifecycle table is the one place that decides which state allows
// which operation. This test reads the module's Go sources and fails where
// a package outside sandbox/ decides by comparing states itself: == or !=
// against a state constant (or a state string), a case on state constants,
// a []sandbox.State literal, slices.Contains of a state constant. Such code
// asks Next, Allows, Needs or the state sets of states.go instead.

const sandboxImport = "github.com/zeish/zeish/sandbox"

// clientDirs hold clients of the public API: they read states to show them
// or to know when to stop waiting, and the server refuses what they may
// not do. They are not checked.
// Test helpers (conformance suites, fixtures) are tests, like _test.go files.
var clientDirs = []string{"sdk/", "internal/cli/", "internal/mcp/", "internal/e2b/", "internal/console/", "e2e/", "bench/", "examples/",
	"internal/store/storetest/", "vmm/vmmtest/", "internal/testenv/"}

// dispatchAllowed are functions that compare states to choose HOW to carry
// out an operation the table already allowed (or to keep an invariant),
// not WHETHER it is allowed. Key: path/to/file.go:func. Each must still
// compare states (a stale entry fails the test).
var dispatchAllowed = map[string]string{
	"internal/node/capture.go:captureAny":        "a stopped sandbox is captured from its suspend image, a paused one stays paused",
	"internal/node/lifecycle.go:load":            "invariant: only a stopped sandbox has no VM",
	"internal/node/capturelive.go:settleCapture": "a recovered live capture lets the guest run unless the sandbox is paused",
	"internal/node/node.go:transition":           "error_code and error_message are kept only in state error",
}

// finding is one state comparison outside sandbox/.
type finding struct {
	file, fn, what string
	line           int
}

func (f finding) key() string { return f.file + ":" + f.fn }

var stateConst = regexp.MustCompile(`^State[A-Z][a-z]+$`)

// stateChecks reports the state comparisons in one parsed file.
func stateChecks(fset *token.FileSet, file *ast.File, name string) []finding {
	pkg := ""
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == sandboxImport {
			pkg = "sandbox"
			if imp.Name != nil {
				pkg = imp.Name.Name
			}
		}
	}
	isConst := func(e ast.Expr) bool {
		sel, ok := ast.Unparen(e).(*ast.SelectorExpr)
		if !ok || pkg == "" {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == pkg && stateConst.MatchString(sel.Sel.Name) && sel.Sel.Name != "States"
	}
	isStateField := func(e ast.Expr) bool {
		sel, ok := ast.Unparen(e).(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "State"
	}
	// A string spelling a state ("" is no state: a zero check is fine).
	isString := func(e ast.Expr) bool {
		lit, ok := ast.Unparen(e).(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
		s, _ := strconv.Unquote(lit.Value)
		return State(s).Valid()
	}
	isStateType := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || pkg == "" {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == pkg && sel.Sel.Name == "State"
	}
	var out []finding
	var fn string
	add := func(n ast.Node, what string) {
		out = append(out, finding{file: name, fn: fn, what: what, line: fset.Position(n.Pos()).Line})
	}
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			fn = n.Name.Name
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				break
			}
			switch {
			case isConst(n.X) || isConst(n.Y):
				add(n, "compares a state constant")
			case isStateField(n.X) && isString(n.Y), isStateField(n.Y) && isString(n.X):
				add(n, "compares a state to a string")
			}
		case *ast.CaseClause:
			for _, e := range n.List {
				if isConst(e) {
					add(n, "switches on state constants")
					break
				}
			}
		case *ast.CompositeLit:
			if at, ok := n.Type.(*ast.ArrayType); ok && isStateType(at.Elt) {
				add(n, "lists states")
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Contains" {
				for _, a := range n.Args {
					if isConst(a) {
						add(n, "looks a state constant up in a list")
					}
				}
			}
		}
		return true
	}
	for _, d := range file.Decls {
		fn = ""
		ast.Inspect(d, visit)
	}
	return out
}

func parseSource(t *testing.T, src string) (*token.FileSet, *ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fset, f
}

// TestStateCheckFinds feeds the check offending and clean code: it must
// flag the one and pass the other, or the repo test proves nothing.
func TestStateCheckFinds(t *testing.T) {
	const header = "package x\nimport (\n\t\"slices\"\n\tsb \"github.com/zeish/zeish/sandbox\"\n)\nvar _ = slices.Contains[[]int]\n"
	cases := []struct {
		name, body string
		flagged    bool
	}{
		{"equality", "func f(r sb.Sandbox) bool { return r.State == sb.StateRunning }", true},
		{"inequality, constant first", "func f(r sb.Sandbox) bool { return sb.StateStopped != r.State }", true},
		{"case list", "func f(s sb.State) int { switch s { case sb.StatePaused, sb.StateRunning: return 1 }; return 0 }", true},
		{"list of states", "var allowed = []sb.State{sb.StateRunning}", true},
		{"contains", "func f(xs []sb.State, s sb.State) bool { return slices.Contains(xs, sb.StateRunning) }", true},
		{"string literal", "func f(r sb.Sandbox) bool { return r.State != \"running\" }", true},
		{"parenthesised", "func f(r sb.Sandbox) bool { return (r.State) == (sb.StateError) }", true},
		{"asks the table", "func f(r sb.Sandbox) error { _, err := sb.Next(r.State, sb.OpStop); return err }", false},
		{"assigns a state", "func f(r *sb.Sandbox) { r.State = sb.StateStarting }", false},
		{"struct field", "var x = sb.Sandbox{State: sb.StateRunning}", false},
		{"a set from sandbox", "var x = sb.SlotStates", false},
		{"a zero check", "func f(r sb.Sandbox) bool { return r.State != \"\" }", false},
		{"template states are not sandbox states", "func f(t sb.Template) bool { return t.State == sb.TemplateReady }", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fset, f := parseSource(t, header+c.body+"\n")
			got := stateChecks(fset, f, "x.go")
			if (len(got) > 0) != c.flagged {
				t.Fatalf("flagged %v, want %v", got, c.flagged)
			}
		})
	}
	// Without the sandbox import, a selector named like a constant is someone else's.
	fset, f := parseSource(t, "package x\ntype y struct{ StateRunning int }\nfunc f(a, b y) bool { return a.StateRunning == b.StateRunning }\n")
	if got := stateChecks(fset, f, "x.go"); len(got) != 0 {
		t.Fatalf("flagged %v without the sandbox import", got)
	}
}

// TestNoStateChecksOutsideSandbox is the repo check.
func TestNoStateChecksOutsideSandbox(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above sandbox/: %v", err)
	}
	var found []finding
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", "vendor", ".git":
				return filepath.SkipDir
			}
			if rel == "sandbox" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		for _, c := range clientDirs {
			if strings.HasPrefix(rel, c) {
				return nil
			}
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		found = append(found, stateChecks(fset, f, rel)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read only %d Go files under %s: the walk is broken", files, root)
	}
	used := map[string]bool{}
	var bad []string
	for _, f := range found {
		if _, ok := dispatchAllowed[f.key()]; ok {
			used[f.key()] = true
			continue
		}
		bad = append(bad, fmt.Sprintf("%s:%d (%s): %s", f.file, f.line, f.fn, f.what))
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("%s; ask the lifecycle table (sandbox.Next, Allows, Needs) or a state set of sandbox/states.go", b)
	}
	for k := range dispatchAllowed {
		if !used[k] {
			t.Errorf("dispatchAllowed[%q] matches no state comparison any more: remove it", k)
		}
	}
}
