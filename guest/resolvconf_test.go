//go:build linux

package guest

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// resolv.conf is replaced by rename when its size changes and overwritten
// in place when it does not; either way it ends up saying exactly the
// servers asked for, and its size stays a multiple of the block.
func TestUpdateResolvConf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	inode := func() uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	many := []string{"10.213.0.101", "10.213.0.105", "10.213.0.109", "10.213.0.113", "10.213.0.117"}
	for i, tc := range []struct {
		name    string
		before  string // written first, when not ""
		servers []string
		inPlace bool // the same inode as before
	}{
		{"no file: made", "", []string{"10.213.0.1"}, false},
		{"the image's own file: replaced", "nameserver 192.0.2.53\nsearch example\n", []string{"10.213.0.1"}, false},
		{"the same servers: left alone", "", []string{"10.213.0.1"}, true},
		{"a fork child's gateway: in place", "", []string{"10.213.0.13"}, true},
		{"two servers, same size: in place", "", []string{"10.213.0.13", "10.213.0.14"}, true},
		{"more than a block: replaced", "", many, false},
		{"back to one: replaced", "", []string{"10.213.0.5"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if i == 0 {
				os.Remove(path)
			}
			if tc.before != "" {
				if err := os.WriteFile(path, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var ino uint64
			if _, err := os.Stat(path); err == nil {
				ino = inode()
			}
			if err := updateResolvConf(path, tc.servers); err != nil {
				t.Fatalf("updateResolvConf: %v", err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b)%resolvConfBlock != 0 {
				t.Errorf("size %d, want a multiple of %d", len(b), resolvConfBlock)
			}
			var got []string
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
					got = append(got, f[1])
				} else if line != "" && !strings.HasPrefix(line, "#") {
					t.Errorf("line %q: neither a name server nor a comment", line)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.servers, " ") {
				t.Errorf("servers %v, want %v", got, tc.servers)
			}
			if (inode() == ino) != tc.inPlace {
				t.Errorf("same inode = %v, want %v", inode() == ino, tc.inPlace)
			}
			if _, err := os.Stat(path + ".zeish"); !os.IsNotExist(err) {
				t.Errorf("temporary file left: %v", err)
			}
		})
	}
}
