package qemu

import (
	"bytes"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/zeish/zeish/vmm"
)

// allocated is how many bytes of path's file hold pages.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// sparseRAM makes a tmpfs file of pages pages with data on every tenth.
func sparseRAM(t *testing.T, pages int) (path string, want []byte) {
	t.Helper()
	f, err := os.CreateTemp("/dev/shm", "zeish-inflate-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	defer f.Close()
	want = make([]byte, pages*pageSize)
	for p := 0; p < pages; p += 10 {
		want[p*pageSize+p%pageSize] = byte(p%250 + 1)
		if _, err := f.WriteAt(want[p*pageSize:(p+1)*pageSize], int64(p*pageSize)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(int64(pages * pageSize)); err != nil {
		t.Fatal(err)
	}
	return f.Name(), want
}

func TestPopulateAllocatesHolesWithoutChangingContent(t *testing.T) {
	const pages = 1000
	path, want := sparseRAM(t, pages)
	if got := allocated(t, path); got != pages/10*pageSize {
		t.Fatalf("test file: %d bytes allocated, want %d", got, pages/10*pageSize)
	}
	if err := populate(path); err != nil {
		t.Fatal(err)
	}
	if got := allocated(t, path); got != pages*pageSize {
		t.Errorf("%d bytes allocated after populate, want all %d", got, pages*pageSize)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("content changed (err %v)", err)
	}
}

// An image stays inflated while any source that inflated it runs, and is
// made sparse when the last one is gone.
func TestInflatedImageIsPunchedWhenTheLastSourceGoes(t *testing.T) {
	const pages = 1000
	path, want := sparseRAM(t, pages)
	d := &Driver{log: slog.New(slog.DiscardHandler), inflated: inflations{users: map[string]map[string]bool{}}}
	a := &vmm.Handle{Spec: vmm.Spec{ID: "sb-a"}, MemFile: path}
	b := &vmm.Handle{Spec: vmm.Spec{ID: "sb-b"}, MemFile: path}
	owner := &vmm.Handle{Spec: vmm.Spec{ID: "sb-owner"}, MemFile: path, MemShared: true}
	for _, h := range []*vmm.Handle{a, b, owner} {
		if err := d.inflateSource(h); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		gone *vmm.Handle
		want int64
	}{
		{owner, pages * pageSize}, // never inflated anything
		{a, pages * pageSize},     // b still runs on it
		{b, pages / 10 * pageSize},
	}
	for _, s := range steps {
		d.releaseSource(s.gone)
		d.background.Wait()
		if got := allocated(t, path); got != s.want {
			t.Errorf("after %s is gone: %d bytes allocated, want %d", s.gone.Spec.ID, got, s.want)
		}
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("content changed (err %v)", err)
	}
}
