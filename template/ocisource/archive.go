package ocisource

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Caps on an archive's table of contents (kept in memory while a build
// reads it): a docker archive has three files per layer, an OCI archive one.
const (
	maxArchiveFiles = 16384
	maxArchiveName  = 1024
	maxArchiveLinks = 8
)

// archive is an uploaded tar (a docker archive, or an OCI layout as a
// tar) read in place: its files are found by name and read as sections of
// the file, never copied out.
type archive struct {
	r     io.ReaderAt
	close func() error
	files map[string]archiveFile
}

type archiveFile struct {
	off, size int64
	link      string // a symlink's target, relative to its folder (docker save makes some)
}

// openArchive indexes the tar at p.
func openArchive(ctx context.Context, p string) (*archive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrBadSource)
	}
	files, err := indexArchive(ctx, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &archive{r: f, close: f.Close, files: files}, nil
}

func (a *archive) Close() error { return a.close() }

// indexArchive lists where each regular file's data starts in a tar read
// from f. archive/tar reads a header's blocks and no further, and skips
// data by seeking, so after Next the file offset is the data's. Sparse
// files (their data is not laid out as read) and names no image uses are
// left out.
func indexArchive(ctx context.Context, f io.ReadSeeker) (map[string]archiveFile, error) {
	files := map[string]archiveFile{}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not a tar archive: %v: %w", err, ErrBadImage)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if len(name) > maxArchiveName || name == "." || name == ".." || strings.HasPrefix(name, "../") || sparse(h) {
			continue
		}
		var e archiveFile
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, err
			}
			e = archiveFile{off: off, size: h.Size}
		case tar.TypeSymlink:
			e = archiveFile{link: h.Linkname}
		default:
			continue
		}
		if _, seen := files[name]; !seen && len(files) == maxArchiveFiles {
			return nil, fmt.Errorf("the archive holds more than %d files: %w", maxArchiveFiles, ErrBadImage)
		}
		files[name] = e // a later entry of the same name wins, as when extracting
	}
	return files, nil
}

func sparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// open returns the file name (following the archive's symlinks) and its size.
func (a *archive) open(name string) (io.ReadCloser, int64, error) {
	name = path.Clean(name)
	for hops := 0; ; hops++ {
		e, ok := a.files[name]
		if !ok {
			return nil, 0, fmt.Errorf("the archive has no %s: %w", name, fs.ErrNotExist)
		}
		if e.link == "" {
			return io.NopCloser(io.NewSectionReader(a.r, e.off, e.size)), e.size, nil
		}
		if hops == maxArchiveLinks {
			return nil, 0, fmt.Errorf("%s: too many links: %w", name, ErrBadImage)
		}
		if path.IsAbs(e.link) {
			name = path.Clean(strings.TrimPrefix(e.link, "/"))
		} else {
			name = path.Join(path.Dir(name), e.link)
		}
	}
}
