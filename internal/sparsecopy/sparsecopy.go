// Package sparsecopy copies a file keeping its holes: only the extents that
// hold data are read (SEEK_DATA/SEEK_HOLE, EachData, which the driver's
// punching of zero pages walks too), and all-zero pages inside them are not
// written either, so a 1 GiB guest RAM file with 100 MiB written costs about
// 100 MiB wherever it is copied to.
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
	err = EachData(src, make([]byte, 1<<20), func(chunk []byte, off int64) error {
		w, err := writeNonZero(dst, chunk, off)
		written += w
		return err
	})
	if err != nil {
		return written, err
	}
	return written, dst.Truncate(st.Size())
}

// EachData calls fn with the content of f's data extents, holes skipped:
// in chunks of at most len(buf) bytes, read into buf, each with the offset
// it was read at. It stops at the first error, fn's included.
func EachData(f *os.File, buf []byte, fn func(chunk []byte, off int64) error) error {
	fd := int(f.Fd())
	for off := int64(0); ; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only holes from off on
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for off = data; off < hole; {
			n, rerr := f.ReadAt(buf[:min(int64(len(buf)), hole-off)], off)
			if n > 0 {
				if err := fn(buf[:n], off); err != nil {
					return err
				}
				off += int64(n)
			}
			if rerr == io.EOF {
				return nil
			}
			if rerr != nil {
				return rerr
			}
		}
	}
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
