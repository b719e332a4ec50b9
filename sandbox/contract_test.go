package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The contract is in the repository: docs/ says what zeish promises and
// the code cites it. This fails where a file cites a document that is not
// in the repository (a path out of it, or the specification and notes the
// docs were first drawn from), or a docs/ page that does not exist.
func TestCitationsStayInTheRepo(t *testing.T) {
	root := filepath.Join("..")
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
		rel, _ := filepath.Rel(root, path)
		if rel == filepath.Join("sandbox", "contract_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte("SPEC")) && !bytes.Contains(b, []byte("shared/")) &&
			!bytes.Contains(b, []byte("QEMU-NOTES")) && !bytes.Contains(b, []byte("docs/")) {
			return nil
		}
		for i, line := range strings.Split(string(b), "\n") {
			if citesOutside(line) {
				t.Errorf("%s:%d cites a document outside the repository: %s", rel, i+1, strings.TrimSpace(line))
			}
			for _, page := range docsCited(line) {
				if _, err := os.Stat(filepath.Join(root, "docs", page)); err != nil {
					t.Errorf("%s:%d cites docs/%s, which does not exist", rel, i+1, page)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// citesOutside reports whether line names a document outside the
// repository: ../shared/…, SPEC (as a word: not AF_SPEC or UNSPECIFIED) or
// QEMU-NOTES.
func citesOutside(line string) bool {
	if strings.Contains(line, "../shared/") || strings.Contains(line, "QEMU-NOTES") {
		return true
	}
	word := func(c byte) bool {
		return c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
	}
	for i := strings.Index(line, "SPEC"); i >= 0; {
		end := i + len("SPEC")
		if (i == 0 || !word(line[i-1])) && (end == len(line) || !word(line[end])) {
			return true
		}
		next := strings.Index(line[end:], "SPEC")
		if next < 0 {
			break
		}
		i = end + next
	}
	return false
}

// docsCited are the pages line cites as docs/<page>.md.
func docsCited(line string) []string {
	var out []string
	for rest := line; ; {
		i := strings.Index(rest, "docs/")
		if i < 0 {
			return out
		}
		rest = rest[i+len("docs/"):]
		n := 0
		for n < len(rest) && (rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= '0' && rest[n] <= '9' || rest[n] == '-') {
			n++
		}
		if n > 0 && strings.HasPrefix(rest[n:], ".md") {
			out = append(out, rest[:n]+".md")
		}
	}
}

func TestCitesOutside(t *testing.T) {
	for line, want := range map[string]bool{
		"// SPEC, fork rule 4":             true,
		"see ../shared/SPEC.md":            true,
		"// (QEMU-NOTES: 17 ms)":           true,
		"unix.IFLA_AF_SPEC":                false,
		"OP_UNSPECIFIED = 0":               false,
		"// docs/clone.md, rule 4":         false,
		"a SPECIAL case, and SPECS plural": false,
	} {
		if got := citesOutside(line); got != want {
			t.Errorf("%q: %v, want %v", line, got, want)
		}
	}
	if got := docsCited("docs/clone.md and (docs/fork.md), not docs/ or docs/x.go"); strings.Join(got, ",") != "clone.md,fork.md" {
		t.Errorf("docsCited: %v", got)
	}
}
