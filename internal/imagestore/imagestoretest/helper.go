package imagestoretest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
	"github.com/zeish/zeish/internal/testskip"
)

// The suite's crash and full-disk cases run the store in a helper process:
// the test binary itself, started again with helperEnv set. A package that
// runs the suite calls Main from its TestMain.
const helperEnv = "ZEISH_IMAGESTORE_HELPER"

// Main runs a helper when the suite started this process as one, else the
// tests.
func Main(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "upload":
		helperUpload()
	case "fetch-full":
		helperFetchFull()
	case "sweep":
		helperSweep()
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
		os.Exit(2)
	}
	os.Exit(0)
}

func helperStore(o imagestore.Options) *imagestore.Store {
	b, err := imagestore.OpenBackend(context.Background(), os.Getenv("ZEISH_IMAGE_STORE"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	return imagestore.New(b, o)
}

// helperUpload uploads FILE as IMAGE one chunk at a time, printing each
// chunk stored, until it is killed.
func helperUpload() {
	s := helperStore(imagestore.Options{Parallel: 1})
	u := s.StartUpload(context.Background(), imagestore.UploadSpec{ID: os.Getenv("IMAGE"),
		Files: []imagestore.SourceFile{{Name: "mem", Path: os.Getenv("FILE")}}})
	last := -1
	for {
		select {
		case <-u.Done():
			_, err := u.Wait()
			fmt.Println("done:", err)
			return
		case <-time.After(time.Millisecond):
		}
		if n := u.Progress().ChunksDone; n != last {
			last = n
			fmt.Println("chunks", n)
		}
	}
}

// fullResult is what helperFetchFull reports.
type fullResult struct {
	FetchErr   string   `json:"fetch_err"`
	Full       bool     `json:"full"` // the error is storage_full
	Left       []string `json:"left"` // files a failed fetch left behind
	LazyErr    string   `json:"lazy_err"`
	CacheBytes int64    `json:"cache_bytes"`
}

// helperFetchFull runs in a mount namespace of its own: it mounts a 2 MiB
// tmpfs on DIR, then fetches IMAGE's mem into it (which cannot fit) and
// reads it lazily with the chunk cache on the same tmpfs.
func helperFetchFull() {
	dir := os.Getenv("DIR")
	if err := syscall.Mount("zeish-full", dir, "tmpfs", 0, "size=2m"); err != nil {
		fmt.Println("error: mount:", err)
		os.Exit(1)
	}
	var res fullResult
	ctx := context.Background()
	cache, err := imagestore.OpenCache(filepath.Join(dir, "cache"), 1<<30, nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	s := helperStore(imagestore.Options{Cache: cache})
	m, err := s.Manifest(ctx, os.Getenv("IMAGE"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	err = s.FetchFile(ctx, m, "mem", filepath.Join(dir, "mem"))
	if err != nil {
		res.FetchErr = err.Error()
		res.Full = errors.Is(err, errdefs.ErrStorageFull)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "cache" {
			res.Left = append(res.Left, e.Name())
		}
	}
	// Lazily: the cache fills the tmpfs, and reads go on from memory.
	r, err := s.Reader(ctx, m, "mem", nil)
	if err == nil {
		buf := make([]byte, 1<<20)
		for off := int64(0); off < r.Size() && err == nil; off += int64(len(buf)) {
			_, err = r.ReadAt(buf, off)
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
	}
	if err != nil {
		res.LazyErr = err.Error()
	}
	res.CacheBytes = cache.Size()
	b, _ := json.Marshal(res)
	fmt.Println("result:", string(b))
}

// helper starts the test binary as helper kind with env.
func helper(t *testing.T, h Harness, kind string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(append(os.Environ(), helperEnv+"="+kind, "ZEISH_IMAGE_STORE="+h.URL), h.Env...), env...)
	return cmd
}

func testKillMidUpload(t *testing.T, h Harness) {
	s := open(t, h, imagestore.Options{})
	ctx := ctxFor(t)
	path := filepath.Join(t.TempDir(), "mem")
	RAMFile(t, path, 32<<20, 13)
	stored := 0
	killHelperWhen(t, helper(t, h, "upload", "IMAGE=img_killed", "FILE="+path), func(line string) bool {
		_, err := fmt.Sscanf(line, "chunks %d", &stored)
		return err == nil && stored >= 5
	})
	if stored < 5 {
		t.Fatalf("helper stored %d chunks before it ended", stored)
	}
	if ok, err := s.Durable(ctx, "img_killed"); err != nil || ok {
		t.Fatalf("an upload killed midway is durable = %v, %v", ok, err)
	}
	if _, err := s.Manifest(ctx, "img_killed"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("manifest of a killed upload: %v; want not found", err)
	}
	u := s.StartUpload(ctx, imagestore.UploadSpec{ID: "img_killed", Files: []imagestore.SourceFile{{Name: "mem", Path: path}}})
	m, err := u.Wait()
	if err != nil {
		t.Fatal(err)
	}
	p := u.Progress()
	t.Logf("killed after %d chunks; the restarted upload put %d of %d bytes", stored, p.Uploaded, p.Bytes)
	if p.Uploaded >= p.Bytes {
		t.Errorf("restarted upload put all %d bytes again", p.Bytes)
	}
	fetchesAs(t, s, m, path)
}

// killHelperWhen starts cmd, reads its output until enough says a line
// is the one to stop at (a helper's "done" or "error" before it fails the
// test), then kills it with SIGKILL: no deferred cleanup runs.
func killHelperWhen(t *testing.T, cmd *exec.Cmd, enough func(line string) bool) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if enough(lines.Text()) {
			return
		}
		if strings.HasPrefix(lines.Text(), "done") || strings.HasPrefix(lines.Text(), "error") {
			t.Fatalf("helper: %s", lines.Text())
		}
	}
}

func testFullDisk(t *testing.T, h Harness) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "mounting a small tmpfs in a mount namespace needs root")
	}
	s := open(t, h, imagestore.Options{})
	_, m := uploadRAM(t, s, "img_big", 14)
	dir := t.TempDir()
	cmd := helper(t, h, "fetch-full", "IMAGE="+m.ID, "DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var res fullResult
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "result: "); ok {
			if err := json.Unmarshal([]byte(rest), &res); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("fetch into a full tmpfs: %s; lazy read: cache holds %d bytes, err %q", res.FetchErr, res.CacheBytes, res.LazyErr)
	if !res.Full || !strings.Contains(res.FetchErr, "disk is full") {
		t.Errorf("fetch into a full disk: %q; want a storage_full error saying the disk is full", res.FetchErr)
	}
	if len(res.Left) != 0 {
		t.Errorf("a fetch that failed for room left %v", res.Left)
	}
	if res.LazyErr != "" {
		t.Errorf("lazy read with the cache's disk full: %s; want the bytes served from memory", res.LazyErr)
	}
	// The mount was the helper's alone.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the host sees the helper's tmpfs: %v", entries)
	}
}

func testUnreachable(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	_, err := imagestore.OpenBackend(ctx, h.Unreachable)
	t.Logf("unreachable store (%v): %v", time.Since(began).Round(time.Millisecond), err)
	if !errors.Is(err, blob.ErrUnreachable) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("open an unreachable store = %v; want ErrUnreachable (unavailable)", err)
	}
}

func testWrongCredentials(t *testing.T, h Harness) {
	if h.WrongCredentials == "" {
		return // the backend has no credentials
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := imagestore.OpenBackend(ctx, h.WrongCredentials)
	t.Logf("wrong credentials: %v", err)
	if !errors.Is(err, blob.ErrAccessDenied) || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("open with wrong credentials = %v; want ErrAccessDenied naming the credentials", err)
	}
}
