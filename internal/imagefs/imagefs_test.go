package imagefs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/imagefs"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
)

// TestMain runs the server as a helper process when a test starts this
// binary as one (the restart test kills and restarts it).
func TestMain(m *testing.M) {
	if os.Getenv("ZEISH_IMAGEFS_HELPER") != "" {
		helperServe()
		return
	}
	os.Exit(m.Run())
}

// helperServe serves the FUSE connection inherited as fd 3.
func helperServe() {
	ctx := context.Background()
	b, err := imagestore.OpenBackend(ctx, os.Getenv("ZEISH_IMAGE_STORE"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	cache, err := imagestore.OpenCache(os.Getenv("CACHE"), 1<<30, nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	store := imagestore.New(b, imagestore.Options{Cache: cache})
	srv, err := imagefs.New(imagefs.Options{Store: store, State: os.Getenv("STATE"), Holder: "helper"})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	m, err := store.Manifest(ctx, os.Getenv("IMAGE"))
	if err == nil {
		err = srv.Add(m)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("serving")
	err = srv.Serve(ctx, os.NewFile(3, "fuse"), os.Getenv("RESUMED") != "")
	fmt.Println("served:", err)
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testskip.Skip(t, "mounting FUSE needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testskip.Skip(t, "no /dev/fuse: %v", err)
	}
}

// ramImage writes a RAM-shaped file (pages of data, zero pages, holes).
func ramImage(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(size)
	r := rand.New(rand.NewPCG(1, 2))
	page := make([]byte, 4096)
	for off := int64(0); off < size; off += 4096 {
		if r.IntN(3) == 0 {
			continue
		}
		for i := range page {
			page[i] = byte(r.IntN(255) + 1)
		}
		f.WriteAt(page, off)
	}
}

// mounted mounts a folder for t, unmounted at cleanup.
func mounted(t *testing.T) (string, *os.File) {
	t.Helper()
	dir := t.TempDir()
	dev, err := imagefs.Mount(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		imagefs.Unmount(dir)
		dev.Close()
	})
	return dir, dev
}

// serving mounts a folder for t and serves it with srv until cleanup,
// which unmounts it and waits for the server to stop before it closes
// the connection.
func serving(t *testing.T, srv *imagefs.Server) string {
	t.Helper()
	dir := t.TempDir()
	dev, err := imagefs.Mount(dir)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(context.Background(), dev, false); close(done) }()
	t.Cleanup(func() {
		imagefs.Unmount(dir)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("the server did not stop 30 s after its folder was unmounted")
		}
		dev.Close()
	})
	return dir
}

func TestServesImageFiles(t *testing.T) {
	requireFUSE(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := imagestore.OpenBackend(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cache, err := imagestore.OpenCache(t.TempDir(), 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := imagestore.New(b, imagestore.Options{Cache: cache})
	src := filepath.Join(t.TempDir(), "mem")
	ramImage(t, src, 16<<20)
	m, err := store.Upload(ctx, imagestore.UploadSpec{ID: "img_fs", Files: []imagestore.SourceFile{{Name: "mem", Path: src}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := imagefs.New(imagefs.Options{Store: store, State: t.TempDir(), Holder: "test", Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Add(m); err != nil {
		t.Fatal(err)
	}
	dir := serving(t, srv)

	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "img_fs" {
		t.Fatalf("root lists %v, %v; want img_fs", entries, err)
	}
	path := imagefs.Path(dir, "img_fs", "mem")
	want, _ := os.ReadFile(src)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through FUSE: %v (equal %v)", err, bytes.Equal(got, want))
	}
	// Holes show through SEEK_DATA/SEEK_HOLE.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if data, err := f.Seek(0, 3); err != nil || data != firstData(want) {
		t.Errorf("SEEK_DATA from 0 = %d, %v; want %d", data, err, firstData(want))
	}
	// Mapped copy-on-write, as a VM maps it: writes stay private.
	mem, err := syscall.Mmap(int(f.Fd()), 0, len(want), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, want) {
		t.Error("mapped file differs")
	}
	mem[12345] ^= 0xff
	syscall.Munmap(mem)
	if again, _ := os.ReadFile(path); !bytes.Equal(again, want) {
		t.Error("a private mapping's write reached the file")
	}
	// Nothing writes an image.
	if _, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("open for writing with truncate: %v; want EROFS", err)
	}
	if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		_, err = w.WriteAt([]byte("x"), 0)
		w.Close()
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("write: %v; want EROFS", err)
		}
	}
	// The reads recorded what they touched: replayed into a cold cache,
	// they leave nothing to fetch.
	touched := srv.Touched("img_fs")
	if len(touched) != len(m.Chunks) {
		t.Errorf("touched %d chunks, the image has %d", len(touched), len(m.Chunks))
	}
	cold, err := imagestore.OpenCache(t.TempDir(), 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := imagestore.New(b, imagestore.Options{Cache: cold})
	if err := other.Prefetch(ctx, m, touched); err != nil {
		t.Fatal(err)
	}
	if cold.Size() != m.StoredBytes() {
		t.Errorf("prefetch cached %d bytes; the image stores %d", cold.Size(), m.StoredBytes())
	}
	if err := srv.Remove(ctx, "img_fs"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the name's cache time
	if _, err := os.Stat(filepath.Join(dir, "img_fs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed image still listed: %v", err)
	}
}

func firstData(b []byte) int64 {
	for off := 0; off < len(b); off += 4096 {
		if !bytes.Equal(b[off:off+4096], make([]byte, 4096)) {
			return int64(off)
		}
	}
	return -1
}

// TestRestartWithoutUnmount kills the server while a read waits on the
// store, and starts another on the same connection: the read completes
// with the right bytes, the mapping that was open carries on, and nothing
// was unmounted. The store is a real S3 server, paused to hold the read.
func TestRestartWithoutUnmount(t *testing.T) {
	requireFUSE(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s3, url, b := s3Backend(t)
	store := imagestore.New(b, imagestore.Options{})
	src := filepath.Join(t.TempDir(), "mem")
	ramImage(t, src, 16<<20)
	if _, err := store.Upload(ctx, imagestore.UploadSpec{ID: "img_live", Files: []imagestore.SourceFile{{Name: "mem", Path: src}}}); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(src)
	dir, dev := mounted(t) // this test keeps the connection, as the node does
	state, cacheDir := t.TempDir(), t.TempDir()
	start := func(resumed bool) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "ZEISH_IMAGEFS_HELPER=1", "ZEISH_IMAGE_STORE="+url, "CACHE="+cacheDir,
			"STATE="+state, "IMAGE=img_live")
		if resumed {
			cmd.Env = append(cmd.Env, "RESUMED=1")
		}
		cmd.ExtraFiles = []*os.File{dev}
		cmd.Stderr = os.Stderr
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if !strings.HasPrefix(line, "serving") {
			t.Fatalf("helper: %s", line)
		}
		go io.Copy(io.Discard, out)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	first := start(false)
	f, err := os.Open(imagefs.Path(dir, "img_live", "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, len(want), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	if !bytes.Equal(mem[:1<<20], want[:1<<20]) {
		t.Fatal("first MiB differs")
	}
	// A fault on a page not read yet, while the store does not answer.
	s3.Pause()
	got := make(chan []byte, 1)
	go func() { got <- append([]byte(nil), mem[12<<20:13<<20]...) }()
	time.Sleep(500 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("the read did not wait for the store")
	default:
	}
	first.Process.Kill()
	first.Wait()
	s3.Resume()
	start(true)
	select {
	case b := <-got:
		if !bytes.Equal(b, want[12<<20:13<<20]) {
			t.Fatal("the read the killed server left got wrong bytes from its successor")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the read the killed server left was never answered")
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("the mapping differs after the restart")
	}
}

// s3Backend starts an S3 server for t and opens a store on a bucket of it.
func s3Backend(t *testing.T) (*testenv.S3, string, blob.Backend) {
	t.Helper()
	s3 := testenv.StartS3(t)
	url := "s3://" + s3.NewBucket(t) + "/images?endpoint=" + s3.Endpoint + "&credentials=" + s3.CredentialsFile(t, false)
	b, err := imagestore.OpenBackend(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return s3, url, b
}
