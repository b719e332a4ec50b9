package e2b

import (
	"testing"
	"time"

	"github.com/zeish/zeish/guest"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/filesystem"
)

// Entries exactly as envd gives them: mode is the permission bits alone (a
// directory 0755 is 493, never Go's 2147484141), permissions the entry's
// own ls form, owner and group by name, and a symbolic link typed by what it
// leads to, with the absolute target.
func TestEntryAsEnvd(t *testing.T) {
	mt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		fi   guest.FileInfo
		want *pb.EntryInfo
	}{
		{"directory", guest.FileInfo{Name: "d", Path: "/root/d", Size: 4096, Mode: "drwxr-xr-x", Perm: 0o755, IsDir: true, ModTime: mt, Owner: "root", Group: "root"},
			&pb.EntryInfo{Name: "d", Path: "/root/d", Size: 4096, Mode: 493, Permissions: "drwxr-xr-x", Type: pb.FileType_FILE_TYPE_DIRECTORY, Owner: "root", Group: "root"}},
		{"file with metadata", guest.FileInfo{Name: "f", Path: "/home/user/f", Size: 3, Mode: "-rw-r--r--", Perm: 0o644, ModTime: mt, Owner: "user", Group: "user", Metadata: map[string]string{"k": "v"}},
			&pb.EntryInfo{Name: "f", Path: "/home/user/f", Size: 3, Mode: 420, Permissions: "-rw-r--r--", Type: pb.FileType_FILE_TYPE_FILE, Owner: "user", Group: "user", Metadata: map[string]string{"k": "v"}}},
		{"link to a directory", guest.FileInfo{Name: "l", Path: "/root/l", Size: 1, Mode: "Lrwxrwxrwx", Perm: 0o777, Symlink: "d", ModTime: mt, Owner: "root", Group: "root",
			Target: &guest.LinkTarget{Path: "/root/d", Mode: "drwxr-x---", Perm: 0o750}},
			&pb.EntryInfo{Name: "l", Path: "/root/l", Size: 1, Mode: 0o750, Permissions: "Lrwxrwxrwx", Type: pb.FileType_FILE_TYPE_DIRECTORY, Owner: "root", Group: "root", SymlinkTarget: str("/root/d")}},
		{"dangling link", guest.FileInfo{Name: "x", Path: "/root/x", Size: 7, Mode: "Lrwxrwxrwx", Perm: 0o777, Symlink: "nowhere", ModTime: mt, Target: &guest.LinkTarget{}},
			&pb.EntryInfo{Name: "x", Path: "/root/x", Size: 7, Permissions: "Lrwxrwxrwx", SymlinkTarget: str("/root/x")}},
		{"fifo", guest.FileInfo{Name: "p", Path: "/tmp/p", Mode: "prw-r--r--", Perm: 0o644, ModTime: mt},
			&pb.EntryInfo{Name: "p", Path: "/tmp/p", Mode: 0o644, Permissions: "prw-r--r--"}},
		{"link from an agent older than targets", guest.FileInfo{Name: "o", Path: "/root/o", Mode: "Lrwxrwxrwx", Perm: 0o777, Symlink: "../etc/hosts", ModTime: mt},
			&pb.EntryInfo{Name: "o", Path: "/root/o", Mode: 0o777, Permissions: "Lrwxrwxrwx", Type: pb.FileType_FILE_TYPE_SYMLINK, SymlinkTarget: str("/etc/hosts")}},
	} {
		got := entry(tc.fi)
		tc.want.ModifiedTime = got.ModifiedTime
		if !got.ModifiedTime.AsTime().Equal(mt) || got.String() != tc.want.String() {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}
