package imagefs_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/imagefs"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/template"
	"github.com/zeish/zeish/vmm"
	"github.com/zeish/zeish/vmm/qemu"
)

// TestCloneFromFUSEServedRAM is lazy RAM end to end with real QEMU: a VM of
// the base template writes 32 MiB into its memory, the qemu driver captures
// it, the image goes to a real S3 server, and clones start with their RAM
// file (and device state) served by imagefs: from a cold chunk cache (every
// page the guest touches comes from S3), a cold cache after replaying the
// chunks the previous clone touched, and a warm cache; each against a clone
// of the same image on tmpfs. Every clone runs, answers exec, and shows the
// parent's memory (the md5 of what it wrote). ZEISH_IMAGEFS_ROUNDS repeats
// the set for the measurements in docs/images.md.
func TestCloneFromFUSEServedRAM(t *testing.T) {
	requireFUSE(t)
	testskip.Short(t, "starts VMs")
	testenv.RequireQEMU(t)
	kernel, _, err := template.DefaultKernel()
	if err != nil {
		testskip.Skip(t, "guest kernel: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := qemu.New(qemu.Options{Confine: os.Geteuid() == 0, Logger: log, Accel: vmm.Accel(os.Getenv("ZEISH_ACCEL")),
		ProbeKernel: kernel, AccelCache: filepath.Join(testenv.CacheDir(), "accel.json")})
	if err != nil {
		t.Fatal(err)
	}
	tpl := testenv.BaseTemplate(t)
	newSpec := func() vmm.Spec {
		dir, err := os.MkdirTemp("", "zvm-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return vmm.Spec{ID: "t" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36), Dir: dir, Kernel: tpl.Kernel,
			Initrd: tpl.Initrd, KernelArgs: tpl.KernelArgs, DiskMiB: 2048, MemoryMiB: 256, VCPUs: 1, MAC: "52:54:00:12:34:58"}
	}
	start := func(spec vmm.Spec) (*vmm.Handle, time.Duration) {
		began := time.Now()
		h, err := d.Start(ctx, spec)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() { d.Destroy(context.Background(), h) })
		return h, time.Since(began)
	}
	run := func(h *vmm.Handle, script string) (string, time.Duration) {
		began := time.Now()
		c, err := guest.Connect(ctx, func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, h) })
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
		defer c.Close()
		var out bytes.Buffer
		res, err := c.Exec(ctx, guest.ExecRequest{Argv: []string{"sh", "-c", script}}, nil, &out, &out)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %v %+v: %s", script, err, res, out.String())
		}
		return strings.TrimSpace(out.String()), time.Since(began)
	}

	// The parent: 32 MiB of random bytes in its tmpfs (guest RAM), kept.
	spec := newSpec()
	spec.BaseDisk = tpl.BaseDisk
	parent, _ := start(spec)
	const blob = "head -c 33554432 /dev/urandom > /dev/shm/blob && md5sum /dev/shm/blob | cut -c1-32"
	sum, _ := run(parent, blob)
	imgDir := t.TempDir()
	img, _, err := d.Capture(ctx, parent, imgDir, false)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	t.Cleanup(func() { os.Remove(img.MemFile) })
	layer := filepath.Join(imgDir, "layer.qcow2")
	if err := os.Rename(parent.Disk, layer); err != nil {
		t.Fatal(err)
	}

	// Into the store.
	_, _, backend := s3Backend(t)
	began := time.Now()
	m, err := imagestore.New(backend, imagestore.Options{}).Upload(ctx, imagestore.UploadSpec{ID: "img_vm",
		Files: []imagestore.SourceFile{{Name: "mem", Path: img.MemFile}, {Name: "state", Path: img.StateFile}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image: 256 MiB of RAM, %d KiB of device state; stored %.1f MiB in %d chunks in %v",
		m.Files[1].Size>>10, float64(m.StoredBytes())/(1<<20), len(m.Chunks), time.Since(began).Round(time.Millisecond))

	// serve mounts a folder of its own for image m (so the kernel's page
	// cache of the file starts empty) over a store with cache dir cacheDir.
	serve := func(cacheDir string) (*imagefs.Server, *imagestore.Store, string) {
		cache, err := imagestore.OpenCache(cacheDir, 4<<30, log)
		if err != nil {
			t.Fatal(err)
		}
		store := imagestore.New(backend, imagestore.Options{Cache: cache, Logger: log})
		srv, err := imagefs.New(imagefs.Options{Store: store, State: t.TempDir(), Holder: "test", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Add(m); err != nil {
			t.Fatal(err)
		}
		// Cleanups run last-in first-out: VMs started after this go first.
		t.Cleanup(func() {
			srv.Close()
			cache.Close()
		})
		return srv, store, serving(t, srv)
	}
	// clone starts a clone from the image and times its start and first
	// exec; then (after ready, which sees what the clone touched by then)
	// it checks the clone holds the parent's memory.
	clone := func(from *vmm.Image, ready func()) (startTook, firstExec time.Duration) {
		spec := newSpec()
		spec.BaseDisk, spec.From = layer, from
		h, took := start(spec)
		_, execTook := run(h, "true")
		if ready != nil {
			ready()
		}
		if got, _ := run(h, "md5sum /dev/shm/blob | cut -c1-32"); got != sum {
			t.Fatalf("clone's memory: md5 %s, the parent wrote %s", got, sum)
		}
		d.Destroy(ctx, h)
		return took, execTook
	}
	fromFUSE := func(mount string) *vmm.Image {
		return &vmm.Image{Dir: filepath.Join(mount, m.ID), MemFile: imagefs.Path(mount, m.ID, "mem"),
			StateFile: imagefs.Path(mount, m.ID, "state"), MemoryMiB: img.MemoryMiB}
	}

	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("ZEISH_IMAGEFS_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	type row struct{ name, start, exec, extra string }
	var rows []row
	add := func(name string, s, e time.Duration, extra string) {
		rows = append(rows, row{name, fmt.Sprint(s.Round(time.Millisecond)), fmt.Sprint(e.Round(time.Millisecond)), extra})
	}
	for round := range rounds {
		s, e := clone(img, nil)
		add("RAM on tmpfs", s, e, "")

		// Cold: every chunk the clone touches comes from S3. What it
		// touched up to its first exec is the prefetch list replayed below.
		coldCache := t.TempDir()
		srv, store, mount := serve(coldCache)
		var touched []int
		var atExec int64
		s, e = clone(fromFUSE(mount), func() { touched, atExec = srv.Touched(m.ID), fetched(store) })
		add("FUSE, cold chunk cache (S3)", s, e, fmt.Sprintf("%.1f MiB fetched by the first exec (%d of %d chunks)",
			float64(atExec)/(1<<20), len(touched), len(m.Chunks)))

		_, _, mount = serve(coldCache) // the chunks the cold clone fetched; a new page cache
		s, e = clone(fromFUSE(mount), nil)
		add("FUSE, warm chunk cache", s, e, "")

		srv, store, mount = serve(t.TempDir())
		pbegan := time.Now()
		if err := srv.Prefetch(ctx, m.ID, touched); err != nil {
			t.Fatal(err)
		}
		prefetch := time.Since(pbegan)
		before := fetched(store)
		s, e = clone(fromFUSE(mount), func() { atExec = fetched(store) - before })
		add("FUSE, cold chunk cache, prefetch list replayed first", s, e, fmt.Sprintf("prefetch %v (%.1f MiB); %.1f MiB fetched after it by the first exec",
			prefetch.Round(time.Millisecond), float64(before)/(1<<20), float64(atExec)/(1<<20)))
		t.Logf("round %d done", round+1)
	}
	var table strings.Builder
	table.WriteString("\n| clone of a 256 MiB image | start (launch → running) | first exec | |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&table, "| %s | %s | %s | %s |\n", r.name, r.start, r.exec, r.extra)
	}
	t.Log(table.String())
}

// fetched reads the store's fetch counter.
func fetched(s *imagestore.Store) int64 {
	return int64(testutil.ToFloat64(s.Metrics().FetchBytes))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
