//go:build linux

package guest

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testskip"
)

// Entries as E2B's envd describes them: owner and group by name (the
// number without one), where a symbolic link finally leads as an absolute
// path, and the file's user metadata (user.e2b.* xattrs).
func TestFileEntries(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "chown needs root")
	}
	dir := t.TempDir()
	passwdFile, groupFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	t.Cleanup(func() { passwdFile, groupFile = "/etc/passwd", "/etc/group" })
	os.WriteFile(passwdFile, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n"), 0o644)
	os.WriteFile(groupFile, []byte("root:x:0:\nuser:x:1000:\n"), 0o644)

	a := startAgent(t)
	c := a.connect(t)
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "d", "e"), 0o755))
	must(os.WriteFile(filepath.Join(root, "d", "e", "f.txt"), []byte("hello"), 0o640))
	must(os.Chown(filepath.Join(root, "d", "e", "f.txt"), 1000, 1000))
	must(os.WriteFile(filepath.Join(root, "stranger"), nil, 0o600))
	must(os.Chown(filepath.Join(root, "stranger"), 4242, 4343))
	must(os.Symlink("d/e/f.txt", filepath.Join(root, "rel")))                  // relative
	must(os.Symlink(filepath.Join(root, "rel"), filepath.Join(root, "chain"))) // a link to a link
	must(os.Symlink("d", filepath.Join(root, "dirlink")))
	must(os.Symlink("nowhere", filepath.Join(root, "dangling")))
	realRoot, err := filepath.EvalSymlinks(root)
	must(err)

	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct {
		name         string
		owner, group string
		target       *LinkTarget
	}{
		{"d/e/f.txt", "user", "user", nil},
		{"stranger", "4242", "4343", nil},
		{"d", "root", "root", nil},
		{"rel", "root", "root", &LinkTarget{Path: filepath.Join(realRoot, "d/e/f.txt"), Mode: "-rw-r-----", Perm: 0o640}},
		{"chain", "root", "root", &LinkTarget{Path: filepath.Join(realRoot, "d/e/f.txt"), Mode: "-rw-r-----", Perm: 0o640}},
		{"dirlink", "root", "root", &LinkTarget{Path: filepath.Join(realRoot, "d"), Mode: "drwxr-xr-x", Perm: 0o755}},
		{"dangling", "root", "root", &LinkTarget{}},
	} {
		fi, err := c.Stat(ctx, filepath.Join(root, tc.name))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if fi.Owner != tc.owner || fi.Group != tc.group {
			t.Errorf("%s: owner %q group %q, want %q %q", tc.name, fi.Owner, fi.Group, tc.owner, tc.group)
		}
		switch {
		case tc.target == nil && fi.Target != nil:
			t.Errorf("%s: target %+v on a file that is no link", tc.name, fi.Target)
		case tc.target != nil && (fi.Target == nil || *fi.Target != *tc.target):
			t.Errorf("%s: target %+v, want %+v", tc.name, fi.Target, tc.target)
		}
	}

	// A listing names owners the same way, once per call.
	list, err := c.List(ctx, filepath.Join(root, "d", "e"))
	must(err)
	if len(list) != 1 || list[0].Owner != "user" || list[0].Group != "user" {
		t.Fatalf("list: %+v", list)
	}

	// Metadata: set by a write, read back by StatMeta and ListMeta, absent
	// from plain Stat; an xattr set in the guest counts too, other
	// namespaces and non-UTF-8 values do not.
	md := map[string]string{"owner-team": "infra", "k": "v with spaces"}
	fi, err := c.WriteFileWith(ctx, filepath.Join(root, "m.txt"), WriteOptions{Metadata: md}, strings.NewReader("x"))
	must(err)
	if !maps.Equal(fi.Metadata, md) {
		t.Fatalf("write answered metadata %v, want %v", fi.Metadata, md)
	}
	p := filepath.Join(root, "m.txt")
	must(unix.Setxattr(p, MetadataXattrPrefix+"set-inside", []byte("yes"), 0))
	must(unix.Setxattr(p, "user.other", []byte("not ours"), 0))
	must(unix.Setxattr(p, MetadataXattrPrefix+"binary", []byte{0xff, 0xfe}, 0))
	want := map[string]string{"owner-team": "infra", "k": "v with spaces", "set-inside": "yes"}
	if fi, err = c.StatMeta(ctx, p); err != nil || !maps.Equal(fi.Metadata, want) {
		t.Fatalf("StatMeta: %v %v, want %v", fi.Metadata, err, want)
	}
	if fi, _ = c.Stat(ctx, p); fi.Metadata != nil {
		t.Errorf("plain Stat read metadata: %v", fi.Metadata)
	}
	list, err = c.ListMeta(ctx, root)
	must(err)
	for _, e := range list {
		if e.Name == "m.txt" && !maps.Equal(e.Metadata, want) {
			t.Errorf("ListMeta: %v, want %v", e.Metadata, want)
		}
	}
	// Overwriting replaces the metadata (a new file, as envd's upload does).
	fi, err = c.WriteFileWith(ctx, p, WriteOptions{Metadata: map[string]string{"k": "2"}}, strings.NewReader("y"))
	must(err)
	if !maps.Equal(fi.Metadata, map[string]string{"k": "2"}) {
		t.Errorf("overwrite kept metadata: %v", fi.Metadata)
	}

	for _, bad := range []map[string]string{
		{"": "empty key"},
		{"k\n": "newline"},
		{"k": "caf\u00e9"},
		{strings.Repeat("k", MaxMetadataKeyLen+1): "long"},
		{"big": strings.Repeat("v", MaxMetadataBytes)},
	} {
		_, err := c.WriteFileWith(ctx, filepath.Join(root, "bad"), WriteOptions{Metadata: bad}, strings.NewReader("x"))
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("metadata %q: %v, want invalid_argument", bad, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "bad")); !os.IsNotExist(err) {
		t.Errorf("a refused write left a file: %v", err)
	}
}

func TestSystemStats(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	dir := t.TempDir()
	procStat, procMeminfo = filepath.Join(dir, "stat"), filepath.Join(dir, "meminfo")
	t.Cleanup(func() { procStat, procMeminfo = "/proc/stat", "/proc/meminfo" })
	os.WriteFile(procStat, []byte("cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 100 5 50 800 20 3 2 10 7 0\nintr 1\n"), 0o644)
	os.WriteFile(procMeminfo, []byte("MemTotal:        1000 kB\nMemFree:          200 kB\nMemAvailable:     600 kB\nBuffers:           50 kB\nCached:           300 kB\n"), 0o644)
	st, err := c.Stats(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// busy = user+nice+system+irq+softirq+steal; guest time is inside user.
	if st.CPUBusy != 100+5+50+3+2+10 || st.CPUTotal != 100+5+50+800+20+3+2+10 {
		t.Errorf("cpu busy %d total %d", st.CPUBusy, st.CPUTotal)
	}
	if st.MemTotal != 1000<<10 || st.MemFree != 200<<10 || st.MemAvailable != 600<<10 || st.MemBuffers != 50<<10 || st.MemCached != 300<<10 {
		t.Errorf("memory %+v", st)
	}
	if st.CPUCount < 1 || st.DiskTotal == 0 || st.DiskAvailable > st.DiskTotal {
		t.Errorf("cpus %d disk %d/%d", st.CPUCount, st.DiskAvailable, st.DiskTotal)
	}
}
