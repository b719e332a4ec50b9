package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testskip"
)

// qcow2Header is a minimal qcow2 header naming backing (none if "") at off.
func qcow2Header(magic uint32, backing string, off uint64) []byte {
	b := make([]byte, 4096)
	binary.BigEndian.PutUint32(b[0:], magic)
	binary.BigEndian.PutUint32(b[4:], 3)
	if backing != "" {
		binary.BigEndian.PutUint64(b[8:], off)
		binary.BigEndian.PutUint32(b[16:], uint32(len(backing)))
		copy(b[off:], backing)
	}
	return b
}

func TestQcow2Backing(t *testing.T) {
	long := string(bytes.Repeat([]byte("a"), 1024))
	for _, tc := range []struct {
		name    string
		header  []byte
		want    string
		wantErr error
	}{
		{"backing", qcow2Header(qcow2Magic, "/data/images/img_1/disk.qcow2", 120), "/data/images/img_1/disk.qcow2", nil},
		{"no backing", qcow2Header(qcow2Magic, "", 0), "", nil},
		{"not qcow2", qcow2Header(0x12345678, "/x", 120), "", errdefs.ErrInvalidArgument},
		{"name too long", qcow2Header(qcow2Magic, long, 120), "", errdefs.ErrInvalidArgument},
		{"name past the end", qcow2Header(qcow2Magic, "/x", 4095)[:4096], "", errors.New("any")},
		{"short file", qcow2Header(qcow2Magic, "", 0)[:10], "", errors.New("any")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := qcow2Backing(bytes.NewReader(tc.header))
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != nil && err == nil:
				t.Fatalf("got %q, want an error", got)
			case tc.wantErr != nil && errors.Is(tc.wantErr, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrInvalidArgument):
				t.Fatalf("error %v, want invalid_argument", err)
			}
			if got != tc.want {
				t.Errorf("backing %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDiskBackingOfQemuImg reads what qemu-img writes.
func TestDiskBackingOfQemuImg(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		testskip.Skip(t, "qemu-img not installed")
	}
	dir := t.TempDir()
	base, top := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "top.qcow2")
	for _, args := range [][]string{{"create", "-q", "-f", "qcow2", base, "64M"}, {"create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", top}} {
		if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v %s", args, err, out)
		}
	}
	d := &Driver{}
	for path, want := range map[string]string{top: base, base: ""} {
		if got, err := d.DiskBacking(path); err != nil || got != want {
			t.Errorf("DiskBacking(%s) = %q, %v; want %q", filepath.Base(path), got, err, want)
		}
	}
}
