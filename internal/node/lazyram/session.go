package lazyram

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/imagefs"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/procscan"
)

// A session is one mount and its server, from the first image served to
// the last retired. The server runs in zeishd; its FUSE connection is
// kept open by a keeper process too (`sleep infinity`, fd 3, in a session
// of its own), so that when zeishd exits or dies, VMs mapping the files
// wait on their next fault for the next zeishd, which takes the
// connection back from the keeper (pidfd_getfd) and serves it again
// (imagefs: a resumed connection, its catalog in the state dir).
type session struct {
	dev   *os.File
	srv   *imagefs.Server
	store *imagestore.Store
	// background reads for the prefetch, over the same cache, with fewer
	// requests in flight: a guest's fault must not queue behind them.
	background *imagestore.Store
	cache      *imagestore.Cache
	keeper     int
	done       chan struct{} // closed when Serve returns
}

const keeperFD = 3

func (r *RAM) keeperFile() string { return filepath.Join(r.o.Dir, "keeper.pid") }

// session is the mount, made if there is none. r.mu is held.
func (r *RAM) session() (*session, error) {
	if r.sess != nil {
		return r.sess, nil
	}
	mnt := r.Mount()
	if Mounted(mnt) {
		imagefs.Unmount(mnt)
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, fmt.Errorf("lazy RAM: %w", err)
	}
	// A new connection: the catalog and the cache start empty.
	os.RemoveAll(stateDir(r.o.Dir))
	os.RemoveAll(cacheDir(r.o.Dir))
	dev, err := imagefs.Mount(mnt)
	if err != nil {
		return nil, err
	}
	keeper := exec.Command("sleep", "infinity")
	keeper.ExtraFiles = []*os.File{dev} // fd 3
	keeper.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := keeper.Start(); err != nil {
		imagefs.Unmount(mnt)
		dev.Close()
		return nil, fmt.Errorf("lazy RAM: start the connection's keeper: %w", err)
	}
	go keeper.Wait() // reaped once a teardown kills it
	pid := keeper.Process.Pid
	if err := datadir.WriteFile(r.keeperFile(), []byte(strconv.Itoa(pid)+"\n")); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		imagefs.Unmount(mnt)
		dev.Close()
		return nil, err
	}
	sess, err := r.serve(dev, pid, false)
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		imagefs.Unmount(mnt)
		dev.Close()
		os.Remove(r.keeperFile())
		return nil, err
	}
	r.log.Info("lazy RAM: mounted", "mount", mnt, "keeper", pid)
	return sess, nil
}

// serve starts a server on dev (resumed: a connection a previous server
// served).
func (r *RAM) serve(dev *os.File, keeper int, resumed bool) (*session, error) {
	cache, err := imagestore.OpenCache(cacheDir(r.o.Dir), r.o.CacheBytes, r.log)
	if err != nil {
		return nil, err
	}
	store := imagestore.New(r.o.Backend, imagestore.Options{Cache: cache, Metrics: r.metrics.store, Logger: r.log})
	srv, err := imagefs.New(imagefs.Options{Store: store, State: stateDir(r.o.Dir), Holder: r.o.Holder, Logger: r.log})
	if err != nil {
		cache.Close()
		return nil, err
	}
	background := imagestore.New(r.o.Backend, imagestore.Options{Cache: cache, Parallel: prefetchParallel, Metrics: r.metrics.store, Logger: r.log})
	sess := &session{dev: dev, srv: srv, store: store, background: background, cache: cache, keeper: keeper, done: make(chan struct{})}
	go func() {
		defer close(sess.done)
		// Not r.life: the files must be served while VMs map them,
		// until the mount goes or zeishd exits.
		if err := srv.Serve(context.Background(), dev, resumed); err != nil {
			r.log.Error("lazy RAM: the server stopped", "err", err)
		}
	}()
	r.sess = sess
	return sess, nil
}

// teardownLocked unmounts and forgets the session: no image is served.
func (r *RAM) teardownLocked() {
	sess := r.sess
	r.sess = nil
	if err := imagefs.Unmount(r.Mount()); err != nil {
		r.log.Warn("lazy RAM: unmount", "err", err)
	}
	if sess.keeper > 0 {
		syscall.Kill(sess.keeper, syscall.SIGKILL)
	}
	os.Remove(r.keeperFile())
	select {
	case <-sess.done:
	case <-time.After(10 * time.Second):
		r.log.Warn("lazy RAM: the server did not stop after the unmount")
	}
	sess.srv.Close()
	sess.dev.Close()
	sess.cache.Close()
	os.RemoveAll(stateDir(r.o.Dir))
	os.RemoveAll(cacheDir(r.o.Dir))
	r.log.Info("lazy RAM: unmounted", "mount", r.Mount())
}

// recover takes over what a previous zeishd left.
func (r *RAM) recover() error {
	entries, _ := os.ReadDir(servedDir(r.o.Dir))
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			os.Remove(filepath.Join(servedDir(r.o.Dir), e.Name()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(servedDir(r.o.Dir), e.Name()))
		s := new(served)
		if err != nil || json.Unmarshal(b, s) != nil || s.Manifest == nil || s.Manifest.ID != id {
			r.log.Warn("lazy RAM: unreadable record of a served image, dropped", "file", e.Name(), "err", err)
			os.Remove(filepath.Join(servedDir(r.o.Dir), e.Name()))
			continue
		}
		s.done = closed()
		r.served[id] = s
	}
	r.metrics.Images.Set(float64(len(r.served)))
	mnt := r.Mount()
	r.mu.Lock()
	defer r.mu.Unlock()
	pid := r.keeperPID()
	switch {
	case pid > 0 && Mounted(mnt):
		dev, err := adopt(pid)
		if err == nil {
			_, err = r.serve(dev, pid, true)
		}
		if err != nil {
			return fmt.Errorf("lazy RAM: take over the mount on %s from keeper %d: %w", mnt, pid, err)
		}
		r.log.Info("lazy RAM: took over the mount a previous zeishd served", "mount", mnt, "keeper", pid, "images", len(r.served))
	default:
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
			os.Remove(r.keeperFile())
		}
		if Mounted(mnt) {
			r.log.Warn("lazy RAM: a mount no process serves was left; detached (a VM that mapped it faults on pages it had not read)", "mount", mnt)
			imagefs.Unmount(mnt)
		}
		if len(r.served) == 0 {
			return nil
		}
		sess, err := r.session()
		if err != nil {
			return err
		}
		for _, s := range r.served {
			if err := sess.srv.Add(s.Manifest); err != nil {
				return err
			}
		}
		r.log.Warn("lazy RAM: mounted again for the images a previous zeishd served", "images", len(r.served))
	}
	for _, s := range r.served {
		if r.isLink(s) {
			r.prefetchLocked(s)
		}
	}
	return nil
}

// keeperPID is the keeper a previous zeishd started, if it still runs and
// holds a FUSE connection as fd 3; 0 if not.
func (r *RAM) keeperPID() int {
	b, err := os.ReadFile(r.keeperFile())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if args := procscan.Args(pid); !slices.Equal(args, []string{"sleep", "infinity"}) {
		return 0
	}
	if t, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, keeperFD)); err != nil || t != "/dev/fuse" {
		return 0
	}
	return pid
}

// adopt gets a copy of the keeper's FUSE connection.
func adopt(pid int) (*os.File, error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, keeperFD, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_getfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/fuse"), nil
}

// Mounted says whether something is mounted on dir (in this mount
// namespace).
func Mounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint …
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && unescape(fields[4]) == dir {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
