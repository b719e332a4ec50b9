package node

import (
	"os"
	"testing"
)

// The capture journal is written beside the VM's folder: never through a
// link planted at its path or at a temp name next to it.
func TestJournalNeverFollowsSymlinks(t *testing.T) {
	for _, plant := range []string{"", ".tmp"} {
		h := newHarness(t)
		id := "sbx_journal"
		if err := os.MkdirAll(h.n.sandboxDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
		victim := t.TempDir() + "/victim"
		if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, h.n.journalPath(id)+plant); err != nil {
			t.Fatal(err)
		}
		if err := h.n.writeJournal(id, liveJournal{Image: "img_x"}); err != nil {
			t.Fatalf("link at %q: %v", plant, err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "precious" {
			t.Fatalf("link at journal%s: its target was overwritten: %q", plant, b)
		}
		if fi, err := os.Lstat(h.n.journalPath(id)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("journal is not a regular file: %v %v", fi, err)
		}
	}
}
