package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A console log over its bound is cut to its tail; one under it is left.
func TestTrimLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	small := []byte("boot ok\n")
	os.WriteFile(path, small, 0o600)
	if err := trimLog(path, 1024); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, small) {
		t.Fatalf("a small log changed: %q", b)
	}
	big := append(bytes.Repeat([]byte("x"), 5000), []byte("THE-END")...)
	os.WriteFile(path, big, 0o600)
	if err := trimLog(path, 1024); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if len(b) > 1024 || !bytes.HasSuffix(b, []byte("THE-END")) {
		t.Fatalf("trimmed log: %d bytes, ends %q", len(b), b[max(0, len(b)-10):])
	}
	// A symlink planted in the VM folder is not followed.
	target := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(target, big, 0o600)
	link := filepath.Join(t.TempDir(), "console.log")
	os.Symlink(target, link)
	trimLog(link, 1024)
	if b, _ := os.ReadFile(target); len(b) != len(big) {
		t.Fatal("trimmed through a symlink")
	}
}
