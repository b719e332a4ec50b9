package ocisource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// files is a folder or an archive an OCI layout is read from.
type files interface {
	open(name string) (io.ReadCloser, int64, error)
}

// dirFiles is an OCI layout folder on the server (the admin's oci:DIR).
type dirFiles string

func (d dirFiles) open(name string) (io.ReadCloser, int64, error) {
	f, err := os.Open(filepath.Join(string(d), filepath.FromSlash(name)))
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is not a file: %w", name, fs.ErrNotExist)
	}
	return f, fi.Size(), nil
}

// layoutStore reads blobs from a layout's blobs/sha256 folder.
type layoutStore struct{ files files }

// blobName is where a layout keeps digest d (checked by checkDigest
// first: only hex digits reach the path).
func blobName(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

func (s layoutStore) openBlob(d string) (io.ReadCloser, int64, error) {
	rc, size, err := s.files.open(blobName(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("blob %s is missing from the layout: %w", d, ErrBadImage)
	}
	if err != nil {
		return nil, 0, err
	}
	return rc, size, nil
}

func (s layoutStore) manifest(ctx context.Context, d string) ([]byte, error) {
	return s.small(ctx, d, -1, MaxManifestBytes)
}

func (s layoutStore) small(_ context.Context, d string, _, limit int64) ([]byte, error) {
	rc, size, err := s.openBlob(d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > limit {
		return nil, fmt.Errorf("blob %s is %d bytes, more than the %d MiB cap: %w", d, size, limit>>20, ErrBadImage)
	}
	return readCapped(rc, "blob "+d, limit)
}

func (s layoutStore) blob(_ context.Context, d string) (io.ReadCloser, error) {
	rc, _, err := s.openBlob(d)
	return rc, err
}

// readFile reads the file name of fsys whole, refusing one past limit
// before reading it. missing says what a missing file means.
func readFile(fsys files, name, missing string, limit int64) ([]byte, error) {
	rc, size, err := fsys.open(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", missing, err, ErrBadImage)
	}
	defer rc.Close()
	if size > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d MiB cap: %w", name, size, limit>>20, ErrBadImage)
	}
	return readCapped(rc, name, limit)
}

// openLayout resolves the linux/amd64 image of the layout in fs.
func openLayout(ctx context.Context, fsys files) (*Image, error) {
	raw, err := readFile(fsys, "index.json", "not an OCI image layout (no index.json)", MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	return resolve(ctx, layoutStore{fsys}, raw, "")
}
