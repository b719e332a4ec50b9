package template

import (
	"fmt"
	"io"
	"strings"
)

// A minimal writer for the "newc" cpio format the kernel unpacks as an
// initramfs. Writing it here (instead of running cpio over a staging folder)
// lets the archive hold /dev/console without root, and makes it reproducible:
// fixed inode numbers, owner 0:0, mtime 0.

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpioWriter) header(name string, mode, size, rdevMajor, rdevMinor int) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	name = strings.TrimPrefix(name, "/")
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr + name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

// pad aligns to 4 bytes, as newc requires after the name and after the data.
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) Dir(name string, perm int) { c.header(name, modeDir|perm, 0, 0, 0) }

func (c *cpioWriter) File(name string, perm int, data []byte) {
	c.header(name, modeFile|perm, len(data), 0, 0)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) Symlink(name, target string) {
	c.header(name, modeSymlink|0o777, len(target), 0, 0)
	c.write([]byte(target))
	c.pad(len(target))
}

func (c *cpioWriter) CharDev(name string, perm, major, minor int) {
	c.header(name, modeCharDev|perm, 0, major, minor)
}

// Close writes the trailer; it does not close the underlying writer.
func (c *cpioWriter) Close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)
	return c.err
}
