package e2b

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/filesystem"
)

// fakeFS is a guest file tree for scan: absolute path → entry.
type fakeFS map[string]guest.FileInfo

func (f fakeFS) list(_ context.Context, dir string) ([]guest.FileInfo, error) {
	if fi, ok := f[dir]; dir != "/w" && (!ok || !fi.IsDir) {
		return nil, fmt.Errorf("%s: %w", dir, errdefs.ErrFileNotFound)
	}
	var out []guest.FileInfo
	for p, fi := range f {
		if path.Dir(p) == dir {
			fi.Name, fi.Path = path.Base(p), p
			out = append(out, fi)
		}
	}
	return out, nil
}

func TestWatchPolls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	fs := fakeFS{
		"/w/a":   {Size: 1, Perm: 0o644, ModTime: t0},
		"/w/d":   {IsDir: true, Perm: 0o755},
		"/w/d/b": {Size: 2, Perm: 0o644, ModTime: t0},
	}
	events := func(evs []*pb.FilesystemEvent) string {
		var s []string
		for _, ev := range evs {
			s = append(s, strings.TrimPrefix(ev.Type.String(), "EVENT_TYPE_")+" "+ev.Name)
		}
		return strings.Join(s, ", ")
	}
	for _, tc := range []struct {
		name      string
		recursive bool
		change    func()
		want      string
	}{
		{"nothing", true, func() {}, ""},
		{"create", true, func() { fs["/w/c"] = guest.FileInfo{Perm: 0o644} }, "CREATE c"},
		{"create below, not recursive", false, func() { fs["/w/d/x"] = guest.FileInfo{} }, ""},
		{"create below", true, func() { fs["/w/d/y"] = guest.FileInfo{} }, "CREATE d/y"},
		{"write", true, func() { fs["/w/a"] = guest.FileInfo{Size: 5, Perm: 0o644, ModTime: t0} }, "WRITE a"},
		{"touch", true, func() { fs["/w/a"] = guest.FileInfo{Size: 5, Perm: 0o644, ModTime: t0.Add(time.Second)} }, "WRITE a"},
		{"chmod", true, func() { fs["/w/a"] = guest.FileInfo{Size: 5, Perm: 0o600, ModTime: t0.Add(time.Second)} }, "CHMOD a"},
		{"rename", true, func() { fs["/w/a2"] = fs["/w/a"]; delete(fs, "/w/a") }, "REMOVE a, CREATE a2"},
		{"remove a tree", true, func() {
			for p := range fs {
				if strings.HasPrefix(p, "/w/d") {
					delete(fs, p)
				}
			}
		}, "REMOVE d, REMOVE d/b, REMOVE d/x, REMOVE d/y"},
		{"file becomes a directory", true, func() { fs["/w/c"] = guest.FileInfo{IsDir: true} }, "REMOVE c, CREATE c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &watch{list: fs.list, root: "/w", recursive: tc.recursive}
			var err error
			if w.last, err = scan(context.Background(), w.list, "/w", tc.recursive); err != nil {
				t.Fatal(err)
			}
			tc.change()
			evs, err := w.poll(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := events(evs); got != tc.want {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
			for _, ev := range evs {
				if ev.Entry != nil {
					t.Fatalf("%v carries an entry without include_entry", ev)
				}
			}
		})
	}

	w := &watch{list: fs.list, root: "/w", includeEntry: true}
	w.last, _ = scan(context.Background(), w.list, "/w", false)
	fs["/w/e"] = guest.FileInfo{Size: 3}
	evs, _ := w.poll(context.Background())
	if len(evs) != 1 || evs[0].Entry.GetPath() != "/w/e" || evs[0].Entry.GetSize() != 3 {
		t.Fatalf("include_entry: %v", evs)
	}

	// The watched directory gone ends the watch.
	gone := &watch{list: fs.list, root: "/w/gone"}
	if _, err := gone.poll(context.Background()); !errors.Is(err, errdefs.ErrFileNotFound) {
		t.Fatalf("poll of a removed directory: %v", err)
	}
}

// A tree too big to poll is refused, not polled at great cost.
func TestWatchTooBig(t *testing.T) {
	big := func(_ context.Context, dir string) ([]guest.FileInfo, error) {
		out := make([]guest.FileInfo, maxWatchEntries+1)
		for i := range out {
			out[i].Name = fmt.Sprint(i)
		}
		return out, nil
	}
	if _, err := scan(context.Background(), big, "/w", false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("scan of a huge directory: %v", err)
	}
}

func TestWatcherTable(t *testing.T) {
	tb := newWatcherTable()
	cancelled := 0
	var ids []string
	for range maxWatchers {
		id, err := tb.add("sbx_1", &watcher{sandbox: "sbx_1", cancel: func() { cancelled++ }})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := tb.add("sbx_1", &watcher{sandbox: "sbx_1"}); err == nil {
		t.Fatal("more watchers than the bound")
	}
	if _, err := tb.add("sbx_2", &watcher{sandbox: "sbx_2", cancel: func() {}}); err != nil {
		t.Fatalf("another sandbox's watcher: %v", err)
	}
	if _, err := tb.get("sbx_2", ids[0]); err == nil {
		t.Fatal("a watcher found through another sandbox")
	}
	tb.remove(ids[0])
	if _, err := tb.get("sbx_1", ids[0]); err == nil || cancelled != 1 {
		t.Fatalf("removed watcher: %v, cancelled %d", err, cancelled)
	}
}
