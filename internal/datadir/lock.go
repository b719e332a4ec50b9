// Package datadir guards zeishd's data dir: one zeishd at a time (a second
// one would run recovery on the first one's VMs, killing them as orphans),
// and metadata written so a crash leaves the old or the new file, whole.
package datadir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockName is the lock file in the data dir.
const LockName = "zeishd.lock"

// ErrLocked is returned by Lock when another process holds the data dir.
var ErrLocked = errors.New("data dir in use by another zeishd")

// Lock takes an exclusive lock on dir for as long as the process lives (or
// until release). The kernel drops it when the process dies, kill -9
// included, so a crash never leaves a stale lock.
func Lock(dir string) (release func(), err error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s (pid %s): %w", dir, strings.TrimSpace(string(b[:n])), ErrLocked)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// WriteFile replaces path with data atomically and durably: a new file
// (0600, a random name, never through a symlink) is written and synced,
// renamed over path (which replaces a symlink there, never its target), and
// the folder synced so the rename survives a crash.
func WriteFile(path string, data []byte) error {
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := path + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the entries of dir (a rename, a new file) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// FreeMiB is the space left for an unprivileged writer in dir's filesystem.
func FreeMiB(dir string) (int, bool) {
	var fs syscall.Statfs_t
	if syscall.Statfs(dir, &fs) != nil {
		return 0, false
	}
	return int(fs.Bavail * uint64(fs.Bsize) >> 20), true
}
