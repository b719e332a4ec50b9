package qemu

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// bzImage is a fake kernel of size bytes whose setup header says sects
// setup sectors; magic false leaves the "HdrS" magic out.
func bzImage(size, sects int, magic bool) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	if size > headerMagicAt+4 {
		b[setupSectsOffset] = byte(sects)
		if magic {
			binary.LittleEndian.PutUint32(b[headerMagicAt:], headerMagic)
		}
	}
	return b
}

func TestWriteKernelStub(t *testing.T) {
	for _, c := range []struct {
		name   string
		kernel []byte
		ok     bool
		setup  int // bytes of the kernel the stub starts with
	}{
		{"a bzImage", bzImage(64<<10, 27, true), true, 28 * sectorSize},
		{"setup_sects 0 means 4", bzImage(64<<10, 0, true), true, 5 * sectorSize},
		{"no HdrS magic (not a bzImage)", bzImage(64<<10, 27, false), false, 0},
		{"shorter than a header", bzImage(100, 0, false), false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			kernel, stub := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, kernelStubName)
			if err := os.WriteFile(kernel, c.kernel, 0o644); err != nil {
				t.Fatal(err)
			}
			ok, err := writeKernelStub(kernel, stub)
			if err != nil || ok != c.ok {
				t.Fatalf("writeKernelStub = %v, %v; want %v, nil", ok, err, c.ok)
			}
			got, err := os.ReadFile(stub)
			if !c.ok {
				if !os.IsNotExist(err) {
					t.Errorf("a stub was written for a kernel that is not a bzImage (%v)", err)
				}
				return
			}
			want := append(append([]byte(nil), c.kernel[:c.setup]...), make([]byte, sectorSize)...)
			if !bytes.Equal(got, want) {
				t.Errorf("stub: %d bytes, want the kernel's first %d and one empty sector (%d)", len(got), c.setup, len(want))
			}
		})
	}
}

// The setup sectors of a kernel that ends inside them are an error, not a
// short stub.
func TestWriteKernelStubTruncatedKernel(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(kernel, bzImage(2*sectorSize, 27, true), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := writeKernelStub(kernel, filepath.Join(dir, kernelStubName)); err == nil || ok {
		t.Errorf("writeKernelStub = %v, %v; want an error", ok, err)
	}
}
