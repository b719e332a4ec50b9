package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	dir := t.TempDir()
	box, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 0600", fi, err)
	}
	sealed := box.Seal([]byte("hunter2"), []byte("sbx_a"))
	if strings.Contains(sealed, "hunter2") || sealed == box.Seal([]byte("hunter2"), []byte("sbx_a")) {
		t.Fatalf("sealed %q leaks or repeats", sealed)
	}
	again, err := LoadOrCreate(dir) // the same key, read back
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Open(sealed, []byte("sbx_a")); err != nil || string(got) != "hunter2" {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := again.Open(sealed, []byte("sbx_b")); err == nil {
		t.Fatal("opened under another owner")
	}
	other, _ := LoadOrCreate(t.TempDir())
	if _, err := other.Open(sealed, []byte("sbx_a")); err == nil {
		t.Fatal("opened with another key")
	}
	for _, bad := range []string{"", "v1:", "v1:!!", "v2:abcd"} {
		if _, err := box.Open(bad, nil); err == nil {
			t.Errorf("Open(%q) accepted", bad)
		}
	}
}
