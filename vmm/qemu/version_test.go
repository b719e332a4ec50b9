package qemu

import (
	"slices"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out     string
		want    version
		wantErr bool
	}{
		{"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)\nCopyright", version{7, 2}, false},
		{"QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)", version{10, 0}, false},
		{"something else", version{}, true},
	}
	for _, tt := range tests {
		got, err := parseVersion(tt.out)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseVersion(%q) = %v, %v; want %v, err %v", tt.out, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestConfinementArgsByVersion(t *testing.T) {
	c := &confinement{user: "zeish-vm"}
	if got := c.args("/d", version{7, 2}); !slices.Equal(got, []string{"-runas", "zeish-vm", "-chroot", "/d"}) {
		t.Errorf("7.2: %q", got)
	}
	if got := c.args("/d", version{10, 0}); !slices.Equal(got, []string{"-run-with", "user=zeish-vm,chroot=/d"}) {
		t.Errorf("10.0: %q", got)
	}
}
