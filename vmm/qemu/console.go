package qemu

import (
	"io"
	"os"
	"syscall"

	"github.com/zeish/zeish/vmm"
)

// MaxConsoleLog bounds a VM's console.log: the guest writes to its serial
// port as much as it likes, and the file lives in the data dir.
const MaxConsoleLog = 1 << 20

// TrimConsole cuts h's console log back to its last quarter once it is
// over MaxConsoleLog (the node calls it from its VM watch). QEMU appends
// (append=on), so its next write follows what is kept.
func (d *Driver) TrimConsole(h *vmm.Handle) error {
	return trimLog(d.ConsoleLog(h), MaxConsoleLog)
}

// trimLog keeps the last max/4 bytes of path once it is over max bytes.
// A write that lands between the read and the rewrite may be lost: this is
// a log, bounded first.
func trimLog(path string, max int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= max {
		return err
	}
	keep := make([]byte, max/4)
	n, err := f.ReadAt(keep, fi.Size()-int64(len(keep)))
	if err != nil && err != io.EOF {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(append([]byte("[console log trimmed]\n"), keep[:n]...), 0)
	return err
}
