package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestTableWrite(t *testing.T) {
	tb := &table{Header: []string{"measure", "n"}, Rows: [][]string{{"create → exec", "3"}}}
	var b bytes.Buffer
	tb.write(&b)
	want := "\n| measure       | n   |\n| ------------- | --: |\n| create → exec |   3 |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

const smapsSample = `55d0c0000000-55d0c0100000 r-xp 00000000 fe:01 1234   /usr/bin/qemu-system-x86_64
Size:               1024 kB
Rss:                 800 kB
Private_Dirty:         0 kB
7f0000000000-7f0010000000 rw-p 00000000 00:1a 99     /dev/shm/zeish-sbx_a-1.mem (deleted)
Size:             262144 kB
Rss:               20480 kB
Private_Dirty:      4096 kB
Anonymous:           512 kB
7f0020000000-7f0020100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                1000 kB
Private_Dirty:      1000 kB
Anonymous:          1000 kB
VmFlags: rd wr mr mw me ac
`

func TestParseSmaps(t *testing.T) {
	m, err := parseSmaps(strings.NewReader(smapsSample), "/dev/shm/zeish-sbx_a-1.mem")
	if err != nil {
		t.Fatal(err)
	}
	want := vmMemory{GuestPrivateDirty: 4096 << 10, GuestAnon: 512 << 10, GuestRss: 20480 << 10, TotalRss: 22280 << 10, QEMUOwn: 1800 << 10}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if _, err := parseSmaps(strings.NewReader(smapsSample), "/dev/shm/other.mem"); err == nil {
		t.Error("a file that is not mapped: want an error")
	}
}

func TestMemPath(t *testing.T) {
	cmdline := []byte("qemu-system-x86_64\x00-object\x00memory-backend-file,id=mem,size=256M,mem-path=/dev/shm/x.mem,share=off\x00-kernel\x00k\x00")
	if p, err := memPath(cmdline); err != nil || p != "/dev/shm/x.mem" {
		t.Errorf("memPath = %q, %v", p, err)
	}
}
