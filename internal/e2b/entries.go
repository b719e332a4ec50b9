package e2b

import (
	"path"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/zeish/zeish/guest"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/filesystem"
)

// An entry as envd describes one (its Stat, ListDir, MakeDir, Move and watch
// events):
//   - mode is the Unix permission bits alone (a directory 0755 is 493), and
//     permissions the ls form of the entry itself ("drwxr-xr-x");
//   - owner and group are names, or numbers when the guest has none;
//   - a symbolic link is described by what it finally leads to: its type
//     and mode are its target's, symlink_target the target's absolute path
//     with every link followed (the link's own path when it dangles, whose
//     type is then unspecified), while name, path, size, permissions and
//     modified_time are the link's own;
//   - anything neither a regular file nor a directory (a fifo, a socket, a
//     device) has an unspecified type, which the SDK's list leaves out;
//   - metadata is the file's user.e2b.* extended attributes.
func entry(fi guest.FileInfo) *pb.EntryInfo {
	e := &pb.EntryInfo{
		Name: fi.Name, Path: fi.Path, Size: fi.Size, Permissions: fi.Mode, Mode: fi.Perm,
		Type: entryType(fi.Mode, fi.IsDir), Owner: fi.Owner, Group: fi.Group,
		ModifiedTime: timestamppb.New(fi.ModTime), Metadata: fi.Metadata,
	}
	if e.Name == "" {
		e.Name = path.Base(fi.Path)
	}
	switch target := linkTarget(fi); {
	case fi.Target != nil:
		e.SymlinkTarget = &target.Path
		e.Type, e.Mode = pb.FileType_FILE_TYPE_UNSPECIFIED, 0
		if target.Mode != "" {
			e.Type, e.Mode = entryType(target.Mode, false), target.Perm
		}
	case fi.Symlink != "":
		// An agent older than Target: what the link leads to is unknown.
		e.SymlinkTarget, e.Type = &target.Path, pb.FileType_FILE_TYPE_SYMLINK
	}
	return e
}

// entryType reads the type from the first letter of an ls-form mode ("" for
// an agent that sent none: then isDir decides between the two).
func entryType(mode string, isDir bool) pb.FileType {
	if mode == "" {
		if isDir {
			return pb.FileType_FILE_TYPE_DIRECTORY
		}
		return pb.FileType_FILE_TYPE_FILE
	}
	switch mode[0] {
	case '-':
		return pb.FileType_FILE_TYPE_FILE
	case 'd':
		return pb.FileType_FILE_TYPE_DIRECTORY
	}
	return pb.FileType_FILE_TYPE_UNSPECIFIED
}

// linkTarget is where a symlink leads. An agent older than Target reports
// only the link's text: a relative one is taken from the link's folder
// (without following further links), and its type is unknown.
func linkTarget(fi guest.FileInfo) guest.LinkTarget {
	switch {
	case fi.Target != nil && fi.Target.Path != "":
		return *fi.Target
	case fi.Target != nil:
		return guest.LinkTarget{Path: fi.Path} // dangling, as envd says it
	case path.IsAbs(fi.Symlink):
		return guest.LinkTarget{Path: path.Clean(fi.Symlink)}
	}
	return guest.LinkTarget{Path: path.Join(path.Dir(fi.Path), fi.Symlink)}
}

// isDirEntry says whether an entry is a directory, or a link to one.
func isDirEntry(fi guest.FileInfo) bool {
	if fi.Target != nil {
		return entryType(fi.Target.Mode, false) == pb.FileType_FILE_TYPE_DIRECTORY
	}
	return fi.IsDir
}
