package ocisource

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"
)

// digestReader hashes what passes through it and, at EOF, checks the
// digest (and the size, when known): a mismatch is returned in place of
// io.EOF, so a reader that reads to the end cannot miss it.
type digestReader struct {
	r    io.Reader
	what string
	want string // "sha256:…"; "" checks nothing
	size int64  // -1: unknown
	h    hash.Hash
	n    int64
	done bool
	err  error // the verdict, once at EOF
}

func newDigestReader(r io.Reader, what, want string, size int64) *digestReader {
	return &digestReader{r: r, what: what, want: want, size: size, h: sha256.New()}
}

func (d *digestReader) Read(p []byte) (int, error) {
	if d.done {
		return 0, d.verdict()
	}
	n, err := d.r.Read(p)
	if d.want != "" {
		d.h.Write(p[:n])
	}
	d.n += int64(n)
	if d.size >= 0 && d.n > d.size {
		d.done, d.err = true, fmt.Errorf("%s %s is longer than the %d bytes its descriptor says: %w", d.what, d.want, d.size, ErrBadImage)
		return n, d.err
	}
	if err == io.EOF {
		d.done = true
		return n, d.verdict()
	}
	return n, err
}

func (d *digestReader) verdict() error {
	if d.err != nil {
		return d.err
	}
	switch got := "sha256:" + hex.EncodeToString(d.h.Sum(nil)); {
	case d.size >= 0 && d.n != d.size:
		d.err = fmt.Errorf("%s %s is %d bytes, its descriptor says %d: %w", d.what, d.want, d.n, d.size, ErrBadImage)
	case d.want != "" && got != d.want:
		d.err = fmt.Errorf("%s %s does not match its digest (the bytes hash to %s): %w", d.what, d.want, got, ErrBadImage)
	default:
		d.err = io.EOF
	}
	return d.err
}

// LayerReader is a layer's uncompressed tar, checked as it streams.
type LayerReader struct {
	stored *digestReader // the blob as stored
	plain  io.ReadCloser // decompressed
	tar    *digestReader // the tar, against the diff_id
}

// Verified reads layer l's blob (as Layer.Blob returned it, maybe through a
// progress counter) as its uncompressed tar. Reading to the end checks the
// blob against l.Digest and l.Size and the tar against l.DiffID; Finish
// reads what a tar reader left (padding, trailing blocks) and returns the
// verdict.
func Verified(blob io.Reader, l Layer) (*LayerReader, error) {
	size := l.Size
	if l.Digest == "" {
		size = -1
	}
	stored := newDigestReader(blob, "layer", l.Digest, size)
	plain, err := decompress(stored)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %v: %w", l.Digest, err, ErrBadImage)
	}
	return &LayerReader{stored: stored, plain: plain, tar: newDigestReader(plain, "layer tar (diff_id)", l.DiffID, -1)}, nil
}

func (r *LayerReader) Read(p []byte) (int, error) { return r.tar.Read(p) }

// Finish drains both streams and says whether the layer was what its
// digests name.
func (r *LayerReader) Finish() error {
	defer r.plain.Close()
	if _, err := io.Copy(io.Discard, r.tar); err != nil {
		return wrapBad(err)
	}
	if _, err := io.Copy(io.Discard, r.stored); err != nil {
		return wrapBad(err)
	}
	return nil
}

// Close releases the decompressor (Finish does too).
func (r *LayerReader) Close() error { return r.plain.Close() }

// wrapBad marks a read error of a layer as the image's fault unless it is
// already classed (a cancelled context stays what it is).
func wrapBad(err error) error {
	if errors.Is(err, ErrBadImage) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%v: %w", err, ErrBadImage)
}

// maxZstdWindow bounds the memory a zstd layer may make its decoder take
// (zstd --long's default window); a frame asking for more is refused.
const maxZstdWindow = 128 << 20

// decompress opens a layer stream compressed with gzip, zstd or nothing,
// told apart by their magic numbers.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		return gzip.NewReader(br)
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		d, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}
