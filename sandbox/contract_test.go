package sandbox

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The contract is in the repository: docs/ says what zeish promises and
// the code cites it. This fails where a file cites a document that is not
// in the repository (a path out of it, or the specification the docs were
// first drawn from), or a docs/ page that does not exist.
func TestCitationsStayInTheRepo(t *testing.T) {
	root := filepath.Join("..")
	outside := regexp.MustCompile(`\.\./shared/|\bSPEC\.md\b|\bQEMU-NOTES\b|\bSPEC\b`)
	cited := regexp.MustCompile(`docs/([a-z0-9-]+\.md)`)
	texts := map[string]bool{".go": true, ".md": true, ".ts": true, ".sh": true, ".proto": true, ".yaml": true, ".mjs": true}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || name == "dist" || strings.HasPrefix(name, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !texts[filepath.Ext(path)] && filepath.Base(path) != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(b), "\n") {
			if rel == filepath.Join("sandbox", "contract_test.go") {
				break
			}
			if outside.MatchString(line) {
				t.Errorf("%s:%d cites a document outside the repository: %s", rel, i+1, strings.TrimSpace(line))
			}
			for _, m := range cited.FindAllStringSubmatch(line, -1) {
				if _, err := os.Stat(filepath.Join(root, "docs", m[1])); err != nil {
					t.Errorf("%s:%d cites docs/%s, which does not exist", rel, i+1, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
