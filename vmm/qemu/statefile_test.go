package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// stream builds a migration stream's opening: header, then parts.
func stream(parts ...[]byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, uint32(vmFileMagic))
	binary.Write(&b, binary.BigEndian, uint32(3))
	for _, p := range parts {
		b.Write(p)
	}
	return b.Bytes()
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func subsection(name string, fields ...[]byte) []byte {
	b := append([]byte{vmSubsection, byte(len(name))}, name...)
	b = append(b, be32(1)...)
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestConfigSection(t *testing.T) {
	machine := cat([]byte{vmSectionConfig}, be32(12), []byte("pc-q35-10.0\x00"))
	caps := subsection("configuration/capabilities", be32(2), []byte{15}, []byte("x-ignore-shared"), []byte{10}, []byte("mapped-ram"))
	uuid := subsection("configuration/uuid", make([]byte, 16))
	pageBits := subsection("configuration/target-page-bits", be32(12))
	device := cat([]byte{0x04}, be32(1), []byte{5}, []byte("timer"), be32(0), be32(2), []byte("…"))
	for _, tc := range []struct {
		name    string
		file    []byte
		want    []byte
		wantErr string
	}{
		{"machine only", stream(machine, device), machine, ""},
		{"capabilities", stream(machine, caps, device), cat(machine, caps), ""},
		{"every subsection", stream(machine, pageBits, caps, uuid, device), cat(machine, pageBits, caps, uuid), ""},
		{"no configuration (a device-state save)", stream(device), nil, "none"},
		{"unknown subsection", stream(machine, subsection("configuration/new", be32(1)), device), nil, "unknown subsection"},
		{"not a stream", []byte("hello, world"), nil, "not a migration stream"},
		{"cut short", stream(machine[:8]), nil, "configuration section"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(p, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := configSection(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("configSection = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestWithConfigSection(t *testing.T) {
	dir := t.TempDir()
	config := cat([]byte{vmSectionConfig}, be32(3), []byte("q35"))
	devices := cat([]byte{0x04}, be32(1), []byte{5}, []byte("timer"), []byte{0})
	src := filepath.Join(dir, "devices")
	if err := os.WriteFile(src, stream(devices), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "state")
	if err := withConfigSection(dst, src, config); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if want := stream(config, devices); !bytes.Equal(got, want) {
		t.Fatalf("state %q, want %q", got, want)
	}
	if c, err := configSection(dst); err != nil || !bytes.Equal(c, config) {
		t.Fatalf("its configuration section %q, %v; want %q", c, err, config)
	}
	// A stream that has one already is refused, and nothing is written.
	other := filepath.Join(dir, "other")
	if err := withConfigSection(other, dst, config); err == nil {
		t.Fatal("a second configuration section: no error")
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("refused stream left %s (%v)", other, err)
	}
}

func TestPrivatePage(t *testing.T) {
	for _, tc := range []struct {
		entry uint64
		want  bool
	}{
		{0, false},                         // never touched: the file's page
		{pmPresent | pmFile | 1234, false}, // mapped from the file, read only
		{pmPresent | 1234, true},           // an anonymous copy made on write
		{pmSwapped | 77, true},             // swapped out: only anonymous pages are
		{pmPresent | 1<<55 | 99, true},     // soft-dirty or not, still a copy
	} {
		if got := privatePage(tc.entry); got != tc.want {
			t.Errorf("privatePage(%#x) = %v, want %v", tc.entry, got, tc.want)
		}
	}
}

// TestPrivatePages maps a file privately in this process, as QEMU maps an
// image, writes some pages (the kernel's copies) and only reads others:
// both ways of finding private pages find exactly the written ones, and
// copyTo puts them at their offsets.
func TestPrivatePages(t *testing.T) {
	const pages = 64
	dir := t.TempDir()
	img := filepath.Join(dir, "image")
	if err := os.WriteFile(img, bytes.Repeat([]byte{'i'}, pages*pageSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, pages*pageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	written := []int64{0, 1, 2, 7, 30, 63}
	for _, p := range written {
		m[p*pageSize] = byte('a' + p%26)
	}
	var sink byte
	for _, p := range []int64{3, 4, 40} {
		sink += m[p*pageSize] // read: the file's page, mapped
	}
	_ = sink
	addr, err := ramMapping(os.Getpid(), img, pages*pageSize)
	if err != nil {
		t.Fatal(err)
	}
	if addr != uintptr(unsafe.Pointer(&m[0])) {
		t.Fatalf("ramMapping = %#x, want %#x", addr, uintptr(unsafe.Pointer(&m[0])))
	}
	pc, err := openPrivateCopier(os.Getpid(), addr, pages*pageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.close()
	want := [][2]int64{{0, 3}, {7, 1}, {30, 1}, {63, 1}}
	for _, way := range []struct {
		name string
		runs func(func(first, n int64) error) error
	}{{"PAGEMAP_SCAN", pc.scanRuns}, {"pagemap read", pc.readRuns}} {
		var got [][2]int64
		err := way.runs(func(first, n int64) error { got = append(got, [2]int64{first, n}); return nil })
		if way.name == "PAGEMAP_SCAN" && (errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.EINVAL)) {
			t.Logf("%s: not on this kernel (%v)", way.name, err)
			continue
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: runs %v, %v; want %v", way.name, got, err, want)
		}
	}
	out, err := os.Create(filepath.Join(dir, "new"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	n, err := pc.copyTo(out)
	if err != nil || n != int64(len(written)) {
		t.Fatalf("copyTo: %d pages, %v; want %d", n, err, len(written))
	}
	got, _ := os.ReadFile(out.Name())
	for _, p := range written {
		if got[p*pageSize] != byte('a'+p%26) || !bytes.Equal(got[p*pageSize+1:(p+1)*pageSize], bytes.Repeat([]byte{'i'}, pageSize-1)) {
			t.Errorf("page %d not copied whole", p)
		}
	}
	if bytes.ContainsAny(got[3*pageSize:7*pageSize], "ai") {
		t.Errorf("pages only read were copied too")
	}
}
