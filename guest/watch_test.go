//go:build linux

package guest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// waitEvents reads w until every one of want ("op name") was seen, in any
// order among the others; the deadline only bounds a hang.
func waitEvents(t *testing.T, w *DirWatch, want ...string) []string {
	t.Helper()
	var seen []string
	deadline := time.After(20 * time.Second)
	for {
		missing := slices.DeleteFunc(slices.Clone(want), func(s string) bool { return slices.Contains(seen, s) })
		if len(missing) == 0 {
			return seen
		}
		select {
		case evs, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended (%v); seen %q, missing %q", w.Err(), seen, missing)
			}
			for _, ev := range evs {
				seen = append(seen, ev.Op+" "+ev.Name)
			}
		case <-deadline:
			t.Fatalf("seen %q, missing %q", seen, missing)
		}
	}
}

func TestWatchDir(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "old", "deep"), 0o755))

	w, err := c.WatchDir(ctxT(t, time.Minute), root, true)
	must(err)
	must(os.WriteFile(filepath.Join(root, "a"), []byte("1"), 0o644))
	waitEvents(t, w, "create a", "write a")
	must(os.Chmod(filepath.Join(root, "a"), 0o600))
	must(os.Rename(filepath.Join(root, "a"), filepath.Join(root, "b")))
	waitEvents(t, w, "chmod a", "rename a", "create b")
	// Directories that existed before, and ones made during the watch, are followed.
	must(os.WriteFile(filepath.Join(root, "old", "deep", "x"), nil, 0o644))
	must(os.MkdirAll(filepath.Join(root, "new"), 0o755))
	waitEvents(t, w, "create old/deep/x", "create new")
	must(os.WriteFile(filepath.Join(root, "new", "y"), nil, 0o644))
	must(os.Remove(filepath.Join(root, "b")))
	waitEvents(t, w, "create new/y", "remove b")
	// The agent's own writes (a temp file renamed into place) show as a
	// create of a new file and a write of an existing one, never the temp.
	_, err = c.WriteFile(ctxT(t, time.Minute), filepath.Join(root, "up"), 0o644, strings.NewReader("1"))
	must(err)
	seen := waitEvents(t, w, "create up")
	_, err = c.WriteFile(ctxT(t, time.Minute), filepath.Join(root, "old", "deep", "x"), 0o644, strings.NewReader("2"))
	must(err)
	seen = append(seen, waitEvents(t, w, "write old/deep/x")...)
	if slices.ContainsFunc(seen, func(s string) bool { return strings.Contains(s, ".zeish-") }) {
		t.Fatalf("the agent's temp files were reported: %q", seen)
	}
	must(w.Close())
	if _, ok := <-w.Events(); ok {
		for range w.Events() {
		}
	}
	if w.Err() != nil {
		t.Fatalf("err after Close: %v", w.Err())
	}

	// Not recursive: only the directory's own entries.
	flat, err := c.WatchDir(ctxT(t, time.Minute), root, false)
	must(err)
	must(os.WriteFile(filepath.Join(root, "new", "z"), nil, 0o644))
	must(os.WriteFile(filepath.Join(root, "top"), nil, 0o644))
	seen = waitEvents(t, flat, "create top")
	if slices.ContainsFunc(seen, func(s string) bool { return strings.Contains(s, "new/z") }) {
		t.Fatalf("a flat watch reported below: %q", seen)
	}
	flat.Close()

	// The watched directory going ends the watch with file_not_found.
	gone := filepath.Join(root, "gone")
	must(os.Mkdir(gone, 0o755))
	gw, err := c.WatchDir(ctxT(t, time.Minute), gone, true)
	must(err)
	must(os.RemoveAll(gone))
	for range gw.Events() {
	}
	if !errors.Is(gw.Err(), errdefs.ErrFileNotFound) {
		t.Fatalf("watch of a removed directory ended with %v", gw.Err())
	}

	for _, tc := range []struct {
		path string
		want error
	}{
		{filepath.Join(root, "missing"), errdefs.ErrFileNotFound},
		{filepath.Join(root, "old", "deep", "x"), errdefs.ErrInvalidArgument},
		{"relative", errdefs.ErrInvalidArgument},
	} {
		if _, err := c.WatchDir(ctxT(t, time.Minute), tc.path, false); !errors.Is(err, tc.want) {
			t.Errorf("watch %s: %v, want %v", tc.path, err, tc.want)
		}
	}
}

// A directory made inside a recursive watch, with folders and files made in
// it at once (before the agent could watch it), is reported whole, each
// entry once, and what is made in its nested folders later is seen too
// (E2B's recursive watchDir: every change below the directory).
func TestWatchNestedNewDirectories(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	root := t.TempDir()
	w, err := c.WatchDir(ctxT(t, time.Minute), root, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	deep := filepath.Join(root, "n1", "n2", "n3")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	seen := waitEvents(t, w, "create n1", "create n1/n2", "create n1/n2/n3", "create n1/n2/n3/f")
	if err := os.Mkdir(filepath.Join(deep, "n4"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deep, "n4", "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, waitEvents(t, w, "create n1/n2/n3/n4", "create n1/n2/n3/n4/g")...)
	for _, ev := range []string{"create n1", "create n1/n2", "create n1/n2/n3", "create n1/n2/n3/f", "create n1/n2/n3/n4"} {
		if n := countOf(seen, ev); n != 1 {
			t.Errorf("%q seen %d times: %q", ev, n, seen)
		}
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
