package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testenv"
	zeish "github.com/zeish/zeish/sdk/go"
	"github.com/zeish/zeish/template"
)

// benchEnv is everything the sections share: one zeishd of our own on a
// temporary data dir, a client for it, and the base template it boots, so
// raw QEMU runs can boot the very same files.
type benchEnv struct {
	log      *slog.Logger
	opts     options
	tmp      string // removed at the end; holds data/, bin/ and raw-QEMU runs
	dataDir  string
	sandboxd string
	// zeishdBin and cacheDir are what the bench's zeishd runs with, for
	// sections that start one more (net).
	zeishdBin, cacheDir string
	tpl                 *template.Artifacts
	accel               string // what zeishd reports: "kvm" or "tcg"

	zeishd *testenv.Zeishd
	client *zeish.Client

	mu   sync.Mutex
	seen map[string]bool // every sandbox id we made, for the RAM-file sweep
}

// setupEnv builds what is missing, starts zeishd and waits for it. On error
// the caller still runs close, which undoes whatever was made.
func setupEnv(ctx context.Context, e *benchEnv) error {
	var err error
	if e.tmp, err = os.MkdirTemp("", "zeish-bench-"); err != nil {
		return err
	}
	e.dataDir = filepath.Join(e.tmp, "data")
	zeishdBin, err := e.binaries(ctx)
	if err != nil {
		return err
	}
	cacheDir := os.Getenv("ZEISH_TEMPLATE_CACHE")
	if cacheDir == "" {
		cacheDir = filepath.Join(testenv.CacheDir(), "templates")
	}
	e.log.Info("base template", "cache", cacheDir)
	// The same inputs as zeishd will hash to the same cached build, so raw
	// QEMU and zeishd boot byte-identical kernel, initrd and disk.
	if e.tpl, err = template.BuildBase(ctx, template.BaseOptions{
		CacheDir: cacheDir, SandboxdPath: e.sandboxd, Logger: e.log,
	}); err != nil {
		return err
	}
	e.zeishdBin, e.cacheDir = zeishdBin, cacheDir
	return e.startServer(ctx, zeishdBin, cacheDir)
}

// binaries finds or builds zeishd and a static sandboxd, and returns the
// path of zeishd. sandboxd is built as the tests build it, so its bytes, and
// thus the template hash, match theirs and the template cache hits.
func (e *benchEnv) binaries(ctx context.Context) (zeishd string, err error) {
	if e.opts.binDir != "" {
		binDir, _ := filepath.Abs(e.opts.binDir)
		zeishd, e.sandboxd = filepath.Join(binDir, "zeishd"), filepath.Join(binDir, "sandboxd")
		for _, p := range []string{zeishd, e.sandboxd} {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("-bin %s: %w (run `make build`)", e.opts.binDir, err)
			}
		}
		return zeishd, nil
	}
	start := time.Now()
	if e.sandboxd, err = testenv.BuildStatic("./cmd/sandboxd"); err != nil {
		return "", err
	}
	binDir := filepath.Join(e.tmp, "bin")
	if err := testenv.GoBuild(ctx, binDir, "zeishd"); err != nil {
		return "", err
	}
	zeishd = filepath.Join(binDir, "zeishd")
	e.log.Info("built", "sandboxd", e.sandboxd, "zeishd", zeishd, "took", time.Since(start).Round(time.Millisecond))
	return zeishd, nil
}

func (e *benchEnv) startServer(ctx context.Context, zeishdBin, cacheDir string) error {
	e.zeishd = &testenv.Zeishd{
		Bin:     zeishdBin,
		DataDir: e.dataDir,
		Env: []string{
			"ZEISH_SANDBOXD=" + e.sandboxd,
			"ZEISH_TEMPLATE_CACHE=" + cacheDir,
			"ZEISH_LOG_LEVEL=" + e.logLevel(),
			"ZEISH_READY_VMS=" + strconv.Itoa(e.opts.ready),
			// The bench creates and forks faster than the default plan allows.
			"ZEISH_PLAN_RUNNING_SLOTS=100", "ZEISH_PLAN_CREATES_PER_MINUTE=1000", "ZEISH_PLAN_DAILY_CREATES=100000",
		},
		// A Ctrl-C in the terminal reaches only us, and we still need
		// zeishd to delete the sandboxes.
		OwnProcessGroup: true,
	}
	if err := e.zeishd.Start(ctx); err != nil {
		return err
	}
	key, err := e.zeishd.AdminKey()
	if err != nil {
		return err
	}
	e.client = zeish.NewClient("http://"+e.zeishd.Addr+api.BasePath, key)
	h, err := e.client.Health(ctx)
	if err != nil {
		return err
	}
	e.accel = h.Accel
	e.log.Info("zeishd ready", "addr", e.zeishd.Addr, "data", e.dataDir, "vmm", h.VMM, "accel", h.Accel, "version", h.Version)
	return nil
}

// logLevel is zeishd's: debug when its log is kept (-zeishd-log), for
// every step's time.
func (e *benchEnv) logLevel() string {
	if e.opts.zlog != "" {
		return "debug"
	}
	return "info"
}

// track remembers a sandbox for the final sweep.
func (e *benchEnv) track(ids ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		e.seen[id] = true
	}
}

// deleteSandbox deletes one sandbox and waits; it runs even when ctx has
// ended, since nothing we made may outlive the bench.
func (e *benchEnv) deleteSandbox(ctx context.Context, id string) error {
	return deleteSandboxOn(ctx, e.client, id)
}

// deleteSandboxOn is deleteSandbox through client c (another zeishd's).
func deleteSandboxOn(ctx context.Context, c *zeish.Client, id string) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	_, err := c.DeleteSandbox(dctx, id, zeish.Wait())
	return err
}

// close deletes every sandbox zeishd knows, stops zeishd, kills any VM
// process still running from our folders, removes our RAM files and the temp
// dir. Every step runs whatever happened before.
func (e *benchEnv) close() error {
	var errs []error
	if e.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		if list, err := e.client.ListSandboxes(ctx, zeish.ListOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("list sandboxes: %w", err))
		} else {
			for _, sb := range list {
				e.track(sb.ID)
				if _, err := e.client.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
					errs = append(errs, fmt.Errorf("delete %s: %w", sb.ID, err))
				}
			}
		}
		cancel()
	}
	if e.zeishd != nil {
		if err := e.zeishd.Stop(); err != nil {
			errs = append(errs, err)
		}
		if e.opts.zlog != "" {
			if err := os.WriteFile(e.opts.zlog, []byte(e.zeishd.Log.String()), 0o644); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if e.tmp != "" {
		for _, pid := range procscan.Under(e.tmp) {
			errs = append(errs, fmt.Errorf("VM process %d left running; killed", pid))
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	e.mu.Lock()
	for id := range e.seen {
		files, _ := filepath.Glob("/dev/shm/*" + id + "*")
		for _, f := range files {
			errs = append(errs, fmt.Errorf("RAM file %s left behind; removed", f))
			os.Remove(f)
		}
	}
	e.mu.Unlock()
	// Images zeishd keeps (a warm template a failed section did not
	// delete, say) hold RAM files outside the temp dir.
	if e.dataDir != "" {
		for _, f := range testenv.ImageRAMFiles(e.dataDir) {
			os.Remove(f)
		}
	}
	if files, _ := filepath.Glob(rawMemGlob()); len(files) > 0 {
		for _, f := range files {
			os.Remove(f)
		}
	}
	if e.tmp != "" {
		if err := os.RemoveAll(e.tmp); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 && e.zeishd != nil {
		e.log.Warn("cleanup problems; zeishd log tail follows\n" + e.zeishd.Log.Tail(4000))
	}
	return errors.Join(errs...)
}

// metric reads one sample of zeishd's /metrics: the first of metric name
// whose labels contain label ("" for any).
func (e *benchEnv) metric(ctx context.Context, name, label string) (float64, error) {
	return metricAt(ctx, e.zeishd.Addr, name, label)
}

// metricAt is metric of the zeishd listening at addr.
func metricAt(ctx context.Context, addr, name, label string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		labels, _ := strings.CutPrefix(series, name)
		if !ok || !strings.HasPrefix(series, name) || (labels != "" && labels[0] != '{') || !strings.Contains(labels, label) {
			continue
		}
		return strconv.ParseFloat(value, 64)
	}
	return 0, fmt.Errorf("metric %s{%s}: not served", name, label)
}

// waitReadyVMs waits (up to a minute) until zeishd keeps at least n ready
// VMs: a warm create measured then finds one, as a create that is not the
// first of a burst does.
func (e *benchEnv) waitReadyVMs(ctx context.Context, n int) error {
	return waitReadyAt(ctx, e.zeishd.Addr, n, time.Minute)
}

// waitReadyAt waits (up to bound) until the zeishd at addr keeps at least
// n ready VMs.
func waitReadyAt(ctx context.Context, addr string, n int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		v, err := metricAt(ctx, addr, "zeish_node_ready_vms", "")
		if err == nil && int(v) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %d ready VMs after %s (last: %v, %v)", n, bound, v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
