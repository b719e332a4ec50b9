//go:build linux

package guest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/errdefs"
)

// inotifyMask is what a watch asks the kernel for.
const inotifyMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// dirWatch is one watch call: an inotify instance and the directories it
// follows, by watch descriptor.
type dirWatch struct {
	fd        int
	root      string
	recursive bool
	dirs      map[int]string // wd → path relative to root ("" for root)
	rootWD    int
	// known holds the entries (relative paths) the watch has seen exist,
	// so a file the agent replaces (writeFile: a temp file renamed over it)
	// is reported as written, a new one as created.
	known map[string]bool
	// tempMoves are the cookies of the agent's temp files moved away: the
	// matching move-in is such a replacement.
	tempMoves map[uint32]bool
}

// maxKnown bounds what a watch remembers of existing entries; past it a
// replaced file may be reported as created.
const maxKnown = 1 << 17

// agentTemp says whether name is one of the agent's own temp files
// (writeFile's "."+base+".zeish-*"), which a watch does not report.
func agentTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".zeish-")
}

func (d *dirWatch) remember(rel string) {
	if len(d.known) < maxKnown {
		d.known[rel] = true
	}
}

// add follows dir (rel below the root) and, when recursive, every
// directory under it. With found set (a directory made during the watch),
// the entries already in it that the watch has not reported are appended to
// *found as created: they were made before its inotify watch was in place
// (mkdir -p a/b/c, or a file written at once into a new directory), so the
// kernel reports nothing of them.
func (d *dirWatch) add(dir, rel string, found *[]WatchEvent) error {
	if len(d.dirs) >= MaxWatchDirs {
		return fmt.Errorf("watch %s: more than %d directories: %w", d.root, MaxWatchDirs, errdefs.ErrInvalidArgument)
	}
	wd, err := unix.InotifyAddWatch(d.fd, dir, inotifyMask)
	if err != nil {
		return fsErr("watch", dir, err)
	}
	d.dirs[wd] = rel
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // gone or unreadable since: nothing below it to follow
	}
	for _, e := range entries {
		name := path.Join(rel, e.Name())
		if found != nil && !agentTemp(e.Name()) && !d.known[name] {
			*found = append(*found, WatchEvent{Name: name, Op: WatchCreate, Dir: e.IsDir()})
		}
		d.remember(name)
		if e.IsDir() && d.recursive {
			if err := d.add(filepath.Join(dir, e.Name()), name, found); err != nil && !errors.Is(err, errdefs.ErrFileNotFound) {
				return err
			}
		}
	}
	return nil
}

// watchDir streams the changes below path: a started chunk once the
// watches are in place, then one event chunk (a JSON array of WatchEvent)
// per batch the kernel hands over. It ends when the host closes the call,
// or with an error when the directory itself goes or events were lost.
func (s *Server) watchDir(st *yamux.Stream, r *bufio.Reader, w *chunkWriter, p string, recursive bool) {
	root, err := cleanPath("watch", p)
	if err != nil {
		w.fail(err)
		return
	}
	if fi, err := os.Stat(root); err != nil {
		w.fail(fsErr("watch", root, err))
		return
	} else if !fi.IsDir() {
		w.fail(fmt.Errorf("watch %s: not a directory: %w", root, errdefs.ErrInvalidArgument))
		return
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		w.fail(fmt.Errorf("watch %s: inotify: %v: %w", root, err, errdefs.ErrInternal))
		return
	}
	// Non-blocking, so Go's poller waits for it and Close wakes the reader.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	d := &dirWatch{fd: fd, root: root, recursive: recursive, dirs: map[int]string{}, known: map[string]bool{}, tempMoves: map[uint32]bool{}}
	if err := d.add(root, "", nil); err != nil {
		w.fail(err)
		return
	}
	for wd, rel := range d.dirs {
		if rel == "" {
			d.rootWD = wd
		}
	}
	// The host closing its end ends the watch.
	go func() {
		io.Copy(io.Discard, r)
		f.Close()
		st.Close()
	}()
	if err := w.json(chunkStarted, started{}); err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return // closed: the host left
		}
		evs, err := d.parse(buf[:n])
		if len(evs) > 0 {
			if werr := w.json(chunkStdout, evs); werr != nil {
				return
			}
		}
		if err != nil {
			w.fail(err)
			return
		}
	}
}

// parse turns a batch of inotify events into WatchEvents, following new
// directories when recursive. An error ends the watch.
func (d *dirWatch) parse(b []byte) ([]WatchEvent, error) {
	var out []WatchEvent
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int(int32(binary.NativeEndian.Uint32(b[0:4])))
		mask := binary.NativeEndian.Uint32(b[4:8])
		cookie := binary.NativeEndian.Uint32(b[8:12])
		n := int(binary.NativeEndian.Uint32(b[12:16]))
		if unix.SizeofInotifyEvent+n > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+n]), "\x00")
		b = b[unix.SizeofInotifyEvent+n:]

		if mask&unix.IN_Q_OVERFLOW != 0 {
			return out, fmt.Errorf("watch %s: too many changes at once, events were lost: %w", d.root, errdefs.ErrUnavailable)
		}
		rel, ok := d.dirs[wd]
		if !ok {
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(d.dirs, wd)
		}
		if wd == d.rootWD && mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
			return out, fmt.Errorf("watch %s: the directory was removed or moved: %w", d.root, errdefs.ErrFileNotFound)
		}
		if name == "" {
			continue // about a watched directory itself: its parent reports it
		}
		if agentTemp(name) {
			if mask&unix.IN_MOVED_FROM != 0 {
				if len(d.tempMoves) > 1024 {
					clear(d.tempMoves) // moved out of the tree, never in
				}
				d.tempMoves[cookie] = true
			}
			continue
		}
		ev := WatchEvent{Name: path.Join(rel, name), Dir: mask&unix.IN_ISDIR != 0}
		switch {
		case mask&unix.IN_MOVED_TO != 0 && d.tempMoves[cookie]:
			// The agent replaced or made a file by renaming its temp file.
			delete(d.tempMoves, cookie)
			ev.Op = WatchCreate
			if d.known[ev.Name] {
				ev.Op = WatchWrite
			}
			d.remember(ev.Name)
		case mask&unix.IN_CREATE != 0 && d.known[ev.Name]:
			// Reported already: found in a new directory (add) before the
			// kernel's event for it came.
			continue
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			ev.Op = WatchCreate
			d.remember(ev.Name)
			if ev.Dir && d.recursive {
				var found []WatchEvent
				err := d.add(filepath.Join(d.root, ev.Name), ev.Name, &found)
				out = append(append(out, ev), found...)
				if err != nil && !errors.Is(err, errdefs.ErrFileNotFound) && !errors.Is(err, fs.ErrNotExist) {
					return out, err
				}
				continue
			}
		case mask&unix.IN_MODIFY != 0:
			ev.Op = WatchWrite
		case mask&unix.IN_DELETE != 0:
			ev.Op = WatchRemove
			delete(d.known, ev.Name)
		case mask&unix.IN_MOVED_FROM != 0:
			ev.Op = WatchRename
			delete(d.known, ev.Name)
		case mask&unix.IN_ATTRIB != 0:
			ev.Op = WatchChmod
		default:
			continue
		}
		out = append(out, ev)
	}
	return out, nil
}
