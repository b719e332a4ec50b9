//go:build linux

package guest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	passwdFile, groupFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	t.Cleanup(func() { passwdFile, groupFile = "/etc/passwd", "/etc/group" })
	os.WriteFile(passwdFile, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n"), 0o644)
	os.WriteFile(groupFile, []byte("root:x:0:\nuser:x:1000:\nsudo:x:27:user\nstaff:x:50:\n"), 0o644)
	tests := []struct {
		spec    string
		want    execUser
		wantErr bool
	}{
		{"", execUser{name: "root", home: "/root"}, false},
		{"root", execUser{name: "root", home: "/root"}, false},
		{"user", execUser{name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash", groups: []uint32{27}}, false},
		{"1000", execUser{name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash", groups: []uint32{27}}, false},
		{"user:staff", execUser{name: "user", uid: 1000, gid: 50, home: "/home/user", shell: "/bin/bash", groups: []uint32{27}}, false},
		{"4242", execUser{name: "4242", uid: 4242, gid: 4242, home: "/"}, false},
		{"4242:7", execUser{name: "4242", uid: 4242, gid: 7, home: "/"}, false},
		{"nobody-here", execUser{}, true},
		{"user:nogroup", execUser{}, true},
	}
	for _, tt := range tests {
		got, err := lookupUser(tt.spec)
		if (err != nil) != tt.wantErr {
			t.Errorf("%q: error %v", tt.spec, err)
			continue
		}
		if !tt.wantErr && (got.name != tt.want.name || got.uid != tt.want.uid || got.gid != tt.want.gid ||
			got.home != tt.want.home || !slices.Equal(got.groups, tt.want.groups)) {
			t.Errorf("%q: %+v, want %+v", tt.spec, got, tt.want)
		}
	}
}
