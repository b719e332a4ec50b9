package qemu

import (
	"bytes"
	"os"
	"syscall"
	"testing"
)

func TestSparsifyPunchesOnlyZeroPages(t *testing.T) {
	f, err := os.CreateTemp("/dev/shm", "zeish-sparse-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	// More pages than one read buffer holds: data pages, runs of zero pages
	// (one across the buffer boundary, one at the end), and a hole that was
	// never written.
	const pages = 1200
	inHole := func(p int) bool { return p >= 800 && p < 900 }
	isData := func(p int) bool { return !inHole(p) && (p%7 == 0 || p == 511 || p == 512) }
	want := make([]byte, pages*pageSize)
	data := 0
	for p := 0; p < pages; p++ {
		if isData(p) {
			want[p*pageSize+p%pageSize] = byte(p%250 + 1)
			data++
		}
	}
	for p := 0; p < pages; p++ {
		if !inHole(p) {
			if _, err := f.WriteAt(want[p*pageSize:(p+1)*pageSize], int64(p*pageSize)); err != nil {
				t.Fatal(err)
			}
		}
	}

	freed, err := sparsify(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(f.Name()); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("content changed (err %v)", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.Name(), &st); err != nil {
		t.Fatal(err)
	}
	if allocated := st.Blocks * 512; allocated != int64(data*pageSize) {
		t.Errorf("%d bytes allocated after sparsify, want only the %d data pages", allocated, data)
	}
	if wantFreed := int64((pages - 100 - data) * pageSize); freed != wantFreed {
		t.Errorf("freed %d bytes, want %d", freed, wantFreed)
	}
}

// sparsify never opens its file through a symlink (the file sits in a
// world-writable tmpfs): the link's target keeps its zero pages.
func TestSparsifyNeverFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	target, link := dir+"/target", dir+"/link.mem"
	if err := os.WriteFile(target, make([]byte, 4*pageSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := sparsify(link); err == nil {
		t.Error("sparsify opened a symlink")
	}
	var st syscall.Stat_t
	syscall.Stat(target, &st)
	if st.Blocks == 0 {
		t.Fatal("sparsify punched holes in a symlink's target")
	}
}
