package qemu

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/zeish/zeish/errdefs"
)

// A migration stream opens with QEMU_VM_FILE_MAGIC, the version, and a
// configuration section: the machine type's name and subsections (the
// capabilities both sides must agree on, x-ignore-shared among them), which
// QEMU checks before loading anything. A device-state save
// (xen-save-devices-state, delta.go) has no such section, and a VM
// refuses it ("Configuration section missing"). Every VM of one node has
// the same configuration, so a delta image's state gets the section of the
// image its source was started from.

const (
	vmFileMagic         = 0x5145564d
	vmSectionConfig     = 0x07
	vmSubsection        = 0x05
	streamHeaderLen     = 8
	maxConfigSectionLen = 4096
)

// configSection returns the configuration section of the migration stream
// in path: its bytes from the section type on, as found after the header.
// It knows the subsections QEMU 7–10 write (target page bits,
// capabilities, uuid) and fails on any other rather than guess its size.
func configSection(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &countingReader{r: bufio.NewReader(io.LimitReader(f, maxConfigSectionLen+streamHeaderLen))}
	bad := func(format string, a ...any) ([]byte, error) {
		return nil, fmt.Errorf("configuration section of %s: %s: %w", path, fmt.Sprintf(format, a...), errdefs.ErrInternal)
	}
	var hdr [streamHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || binary.BigEndian.Uint32(hdr[:]) != vmFileMagic {
		return bad("not a migration stream (%v)", err)
	}
	if b, err := r.ReadByte(); err != nil || b != vmSectionConfig {
		return bad("none")
	}
	// The machine type: a be32 length and its bytes.
	if err := r.skip(int(r.be32())); err != nil {
		return bad("machine name: %v", err)
	}
	for {
		b, err := r.peek()
		if err != nil {
			return bad("%v", err)
		}
		if b != vmSubsection {
			break
		}
		r.ReadByte()
		n, _ := r.ReadByte()
		name := make([]byte, n)
		if _, err := io.ReadFull(r, name); err != nil {
			return bad("subsection name: %v", err)
		}
		r.be32() // version
		switch string(name) {
		case "configuration/target-page-bits":
			r.skip(4)
		case "configuration/capabilities":
			for count := r.be32(); count > 0; count-- {
				l, _ := r.ReadByte()
				r.skip(int(l))
			}
		case "configuration/uuid":
			r.skip(16)
		default:
			return bad("unknown subsection %q", name)
		}
		if r.err != nil {
			return bad("subsection %q: %v", name, r.err)
		}
	}
	if r.err != nil || r.n > maxConfigSectionLen {
		return bad("%v", r.err)
	}
	out := make([]byte, r.n-streamHeaderLen)
	if _, err := f.ReadAt(out, streamHeaderLen); err != nil {
		return nil, err
	}
	return out, nil
}

// countingReader reads big-endian fields, counting bytes and keeping the
// first error.
type countingReader struct {
	r   *bufio.Reader
	n   int
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	} else if c.err == nil {
		c.err = err
	}
	return b, err
}

func (c *countingReader) peek() (byte, error) {
	b, err := c.r.Peek(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (c *countingReader) be32() uint32 {
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0
	}
	return binary.BigEndian.Uint32(b[:])
}

func (c *countingReader) skip(n int) error {
	if n < 0 || n > maxConfigSectionLen {
		c.err = fmt.Errorf("field of %d bytes", n)
		return c.err
	}
	_, err := io.CopyN(io.Discard, c, int64(n))
	return err
}

// withConfigSection writes to dst the device-state save at src with the
// configuration section config put in after its header.
func withConfigSection(dst, src string, config []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	r := bufio.NewReader(in)
	var hdr [streamHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || binary.BigEndian.Uint32(hdr[:]) != vmFileMagic {
		return fmt.Errorf("device state %s: not a migration stream (%v): %w", src, err, errdefs.ErrInternal)
	}
	if next, err := r.Peek(1); err == nil && next[0] == vmSectionConfig {
		return fmt.Errorf("device state %s has a configuration section already: %w", src, errdefs.ErrInternal)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	w.Write(hdr[:])
	w.Write(config)
	_, err = io.Copy(w, r)
	if err == nil {
		err = w.Flush()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}
