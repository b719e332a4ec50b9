package control

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The front ends are adapters over this package: they decode a request,
// call a Control method and encode the answer. What the application owns
// (the records, the templates, the node that runs sandboxes) they reach
// only through it, so no rule can live in a front end unnoticed.
var (
	// The REST server (and the console's session API in it), the E2B
	// facade, and the clients that reach zeish through its API only: the
	// MCP server, the console's web app and the CLI.
	frontEnds = []string{"internal/server", "internal/e2b", "internal/mcp", "internal/console", "internal/cli"}
	appOnly   = []string{
		"github.com/zeish/zeish/internal/node",
		"github.com/zeish/zeish/internal/store",
		"github.com/zeish/zeish/internal/catalog",
	}
)

// bannedImports lists the imports of appOnly packages (or their
// subpackages) in the non-test Go files of dir and the folders below it,
// as "file: import".
func bannedImports(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if slices.ContainsFunc(appOnly, func(a string) bool { return p == a || strings.HasPrefix(p, a+"/") }) {
				out = append(out, path+": "+p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFrontEndsGoThroughControl(t *testing.T) {
	for _, fe := range frontEnds {
		for _, bad := range bannedImports(t, filepath.Join("..", "..", fe)) {
			t.Errorf("%s: a front end reaches the application's insides; call internal/control instead", bad)
		}
	}
}

// The check finds what it must: control itself imports all three.
func TestBannedImportsFinds(t *testing.T) {
	got := bannedImports(t, ".")
	for _, want := range appOnly[1:] {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, ": "+want) }) {
			t.Errorf("the check missed control's import of %s (found %v)", want, got)
		}
	}
}
