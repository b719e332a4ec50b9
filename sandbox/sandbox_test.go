package sandbox

import (
	"errors"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

func TestResolveSize(t *testing.T) {
	cases := []struct {
		name             string
		preset           string
		vcpus, mem, disk int
		want             Size
		wantErr          bool
	}{
		{"default is small", "", 0, 0, 0, Size{1, 512, 2048}, false},
		{"medium", "medium", 0, 0, 0, Size{2, 2048, 8192}, false},
		{"override memory", "small", 0, 256, 0, Size{1, 256, 2048}, false},
		{"explicit all", "", 2, 1024, 4096, Size{2, 1024, 4096}, false},
		{"unknown preset", "huge", 0, 0, 0, Size{}, true},
		{"negative vcpus", "", -1, 0, 0, Size{}, true},
		{"too many vcpus", "", 1000, 0, 0, Size{}, true},
		{"absurd memory", "", 0, 1 << 30, 0, Size{}, true},
		{"tiny memory", "", 0, 16, 0, Size{}, true},
		{"odd memory", "", 0, 257, 0, Size{}, true},
		{"negative disk", "", 0, 0, -5, Size{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ResolveSize(c.preset, c.vcpus, c.mem, c.disk)
			if c.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("got %v, want invalid_argument", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestIDsAndNames(t *testing.T) {
	id := NewID(PrefixSandbox)
	if err := CheckID(PrefixSandbox, id); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "sbx_", "snp_" + id[4:], id + "x", "sbx_ABCDEFGHIJKLMNOPQRST", "../etc/passwd"} {
		if err := CheckID(PrefixSandbox, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckID(%q) = %v, want invalid_argument", bad, err)
		}
	}
	for i := 0; i < 50; i++ {
		if n := NewName(); CheckName(n) != nil {
			t.Fatalf("generated name %q is invalid", n)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "a b", string(make([]byte, 64))} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
}
