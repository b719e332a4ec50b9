// Package sparsecopy copies a file keeping its holes: only the extents that
// hold data are read (SEEK_DATA/SEEK_HOLE), and all-zero pages inside them
// are not written either, so a 1 GiB guest RAM file with 100 MiB written
// costs about 100 MiB wherever it is copied to.
package sparsecopy

import (
	"bytes"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

const pageSize = 4096

var zeroPage = make([]byte, pageSize)

// Copy writes src's content into dst (empty, freshly created) at the same
// offsets, leaving holes where src has holes or zero pages, and gives dst
// src's size. It returns the bytes written.
func Copy(dst, src *os.File) (written int64, err error) {
	st, err := src.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	fd := int(src.Fd())
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only holes from off on
		}
		if err != nil {
			return written, err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return written, err
		}
		for off = data; off < hole; {
			n, rerr := src.ReadAt(buf[:min(int64(len(buf)), hole-off)], off)
			w, werr := writeNonZero(dst, buf[:n], off)
			written += w
			if werr != nil {
				return written, werr
			}
			off += int64(n)
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return written, rerr
			}
		}
	}
	return written, dst.Truncate(size)
}

// writeNonZero writes the pages of buf (read at off) that are not all zero.
func writeNonZero(dst *os.File, buf []byte, off int64) (int64, error) {
	var written int64
	start := -1 // start of the current run of non-zero pages
	flush := func(end int) error {
		if start < 0 {
			return nil
		}
		n, err := dst.WriteAt(buf[start:end], off+int64(start))
		written += int64(n)
		start = -1
		return err
	}
	for p := 0; p < len(buf); p += pageSize {
		end := min(p+pageSize, len(buf))
		if bytes.Equal(buf[p:end], zeroPage[:end-p]) {
			if err := flush(p); err != nil {
				return written, err
			}
		} else if start < 0 {
			start = p
		}
	}
	return written, flush(len(buf))
}

// Allocated is the space a file takes on its filesystem (holes excluded).
func Allocated(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Blocks * 512, nil
}
