package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	addr     string
	binDir   string
	sandboxd string
	tpl      *template.Artifacts
	accel    string // what zeishd reports: "kvm" or "tcg"

	client *zeish.Client
	cmd    *exec.Cmd
	exited chan struct{}
	zlog   *lockedBuffer

	mu   sync.Mutex
	seen map[string]bool // every sandbox id we made, for the RAM-file sweep
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// setupEnv builds what is missing, starts zeishd and waits for it. On error
// the caller still runs close, which undoes whatever was made.
func setupEnv(ctx context.Context, e *benchEnv) error {
	var err error
	if e.tmp, err = os.MkdirTemp("", "zeish-bench-"); err != nil {
		return err
	}
	e.dataDir = filepath.Join(e.tmp, "data")
	if err := e.binaries(ctx); err != nil {
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
	return e.startServer(ctx, cacheDir)
}

// binaries finds or builds zeishd and a static sandboxd. sandboxd is built
// exactly as `make build` and the tests build it (static, -trimpath,
// -buildvcs=false), so its bytes, and thus the template hash, match theirs
// and the template cache hits.
func (e *benchEnv) binaries(ctx context.Context) error {
	if e.opts.binDir != "" {
		e.binDir, _ = filepath.Abs(e.opts.binDir)
		e.sandboxd = filepath.Join(e.binDir, "sandboxd")
		for _, p := range []string{filepath.Join(e.binDir, "zeishd"), e.sandboxd} {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("-bin %s: %w (run `make build`)", e.opts.binDir, err)
			}
		}
		return nil
	}
	e.binDir = filepath.Join(e.tmp, "bin")
	e.sandboxd = filepath.Join(e.binDir, "sandboxd")
	for _, b := range []struct {
		pkg, out string
		env      []string
		args     []string
	}{
		{"./cmd/sandboxd", e.sandboxd, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS="}, []string{"-trimpath", "-buildvcs=false"}},
		{"./cmd/zeishd", filepath.Join(e.binDir, "zeishd"), nil, nil},
	} {
		start := time.Now()
		args := append(append([]string{"build"}, b.args...), "-o", b.out, b.pkg)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
		e.log.Info("built", "pkg", b.pkg, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (e *benchEnv) startServer(ctx context.Context, cacheDir string) error {
	var err error
	if e.addr, err = freeAddr(); err != nil {
		return err
	}
	e.zlog = &lockedBuffer{}
	e.cmd = exec.Command(filepath.Join(e.binDir, "zeishd"))
	e.cmd.Env = append(os.Environ(),
		"ZEISH_DATA_DIR="+e.dataDir,
		"ZEISH_LISTEN="+e.addr,
		"ZEISH_SANDBOXD="+e.sandboxd,
		"ZEISH_TEMPLATE_CACHE="+cacheDir,
		"ZEISH_LOG_LEVEL=info",
		// The bench creates and forks faster than the default plan allows.
		"ZEISH_PLAN_RUNNING_SLOTS=100", "ZEISH_PLAN_CREATES_PER_MINUTE=1000", "ZEISH_PLAN_DAILY_CREATES=100000",
	)
	e.cmd.Stdout, e.cmd.Stderr = e.zlog, e.zlog
	// Its own process group: a Ctrl-C in the terminal reaches only us, and
	// we still need zeishd to delete the sandboxes.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		return err
	}
	e.exited = make(chan struct{})
	go func() { e.cmd.Wait(); close(e.exited) }()
	e.log.Info("zeishd started", "pid", e.cmd.Process.Pid, "addr", e.addr, "data", e.dataDir)

	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + e.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zeishd did not answer /healthz within 60s:\n%s", e.zlog.tail(4000))
		}
		select {
		case <-e.exited:
			return fmt.Errorf("zeishd exited at start:\n%s", e.zlog.tail(4000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	key, err := os.ReadFile(filepath.Join(e.dataDir, "admin.key"))
	if err != nil {
		return err
	}
	e.client = zeish.NewClient("http://"+e.addr+api.BasePath, strings.TrimSpace(string(key)))
	h, err := e.client.Health(ctx)
	if err != nil {
		return err
	}
	e.accel = h.Accel
	e.log.Info("zeishd ready", "vmm", h.VMM, "accel", h.Accel, "version", h.Version)
	return nil
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
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	_, err := e.client.DeleteSandbox(dctx, id, zeish.Wait())
	return err
}

// close deletes every sandbox zeishd knows, stops zeishd, kills any VM
// process still running from our folders, removes our RAM files and the temp
// dir. Every step runs whatever happened before.
func (e *benchEnv) close() error {
	var errs []error
	if e.client != nil && e.cmd != nil {
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
	if e.cmd != nil && e.cmd.Process != nil {
		e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.exited:
		case <-time.After(30 * time.Second):
			e.cmd.Process.Kill()
			<-e.exited
			errs = append(errs, errors.New("zeishd ignored SIGTERM for 30s; killed"))
		}
	}
	if e.tmp != "" {
		for _, pid := range processesUnder(e.tmp) {
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
	if len(errs) > 0 && e.zlog != nil {
		e.log.Warn("cleanup problems; zeishd log tail follows\n" + e.zlog.tail(4000))
	}
	return errors.Join(errs...)
}

// processesUnder lists processes (not us) whose command line names a path
// inside dir: the VMs of our zeishd and our raw QEMU runs.
func processesUnder(dir string) []int { return procscan.Mentioning(dir + "/") }
