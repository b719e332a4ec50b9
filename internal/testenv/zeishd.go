package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// GoBuild builds commands of this module (./cmd/<name>) into dir/<name> with
// a plain go build, as a user would run them.
func GoBuild(ctx context.Context, dir string, names ...string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	for _, name := range names {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, out)
		}
	}
	return nil
}

// Zeishd is a real zeishd process on its own data dir and loopback port, for
// the end-to-end tests and the bench. It returns errors instead of taking a
// testing.TB, since the bench is a plain program. Stop and Start again
// restart it on the same data dir and address.
type Zeishd struct {
	Bin     string   // the zeishd binary
	DataDir string   // ZEISH_DATA_DIR
	Addr    string   // ZEISH_LISTEN; Start picks a free loopback port when empty
	Env     []string // more ZEISH_* settings, after os.Environ
	// OwnProcessGroup keeps a Ctrl-C in the terminal from reaching zeishd,
	// for a caller that still needs it to delete its sandboxes.
	OwnProcessGroup bool
	// Netns runs zeishd inside that network namespace (a NetLab's Node),
	// listening on Listen there; Addr is then a relay to it on the host's
	// loopback (NetLab.Relay). Without Netns zeishd runs with ZEISH_NET=off:
	// tests never touch the host's own network.
	Netns  string
	Listen string
	// TLS, when set, is how to reach a zeishd that serves HTTPS (the caller
	// set ZEISH_TLS_CERT in Env): its /healthz is checked over it.
	TLS *tls.Config

	Log LogBuffer // stdout and stderr of every run

	cmd    *exec.Cmd
	exited chan struct{}
}

// stopGrace is how long Stop waits after SIGTERM before it kills zeishd.
const stopGrace = 30 * time.Second

// Start runs zeishd and waits until it answers /healthz. ctx bounds only the
// wait: zeishd lives until Stop. On error nothing is left running, and the
// error carries the tail of the log.
func (z *Zeishd) Start(ctx context.Context) error {
	if z.cmd != nil {
		return errors.New("zeishd is already running")
	}
	if z.Addr == "" {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		z.Addr = addr
	}
	cmd := exec.Command(z.Bin)
	listen, netDefault := z.Addr, "ZEISH_NET=off"
	if z.Netns != "" {
		// nsenter enters only the network namespace and then execs zeishd.
		cmd = exec.Command("nsenter", "--net=/run/netns/"+z.Netns, z.Bin)
		listen, netDefault = z.Listen, "ZEISH_NET=on"
	}
	env := append(os.Environ(), "ZEISH_DATA_DIR="+z.DataDir, "ZEISH_LISTEN="+listen, netDefault)
	if z.Netns != "" {
		// Clients come through the relay (Addr): the data-plane URLs it
		// hands out must name that, not its address inside the namespace.
		env = append(env, "ZEISH_PUBLIC_URL=http://"+z.Addr)
	}
	cmd.Env = append(env, z.Env...)
	cmd.Stdout, cmd.Stderr = &z.Log, &z.Log
	if z.OwnProcessGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	z.cmd, z.exited = cmd, exited
	if err := z.waitHealthy(ctx); err != nil {
		return errors.Join(fmt.Errorf("%w:\n%s", err, z.Log.Tail(8000)), z.Stop())
	}
	return nil
}

// URL is the base URL zeishd serves on (https when TLS is set).
func (z *Zeishd) URL() string {
	if z.TLS != nil {
		return "https://" + z.Addr
	}
	return "http://" + z.Addr
}

func (z *Zeishd) waitHealthy(ctx context.Context) error {
	const limit = 60 * time.Second
	deadline := time.Now().Add(limit)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: z.TLS}}
	defer hc.CloseIdleConnections()
	for {
		resp, err := hc.Get(z.URL() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zeishd did not answer /healthz within %v", limit)
		}
		select {
		case <-z.exited:
			return errors.New("zeishd exited at start")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Running reports whether zeishd was started and not stopped since; it may
// still have died on its own.
func (z *Zeishd) Running() bool { return z.cmd != nil }

// Stop asks zeishd to exit with SIGTERM and kills it after stopGrace. Either
// way its VMs keep running, for the next Start to re-attach or the caller to
// sweep.
func (z *Zeishd) Stop() error {
	if z.cmd == nil {
		return nil
	}
	defer func() { z.cmd = nil }()
	z.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-z.exited:
		return nil
	case <-time.After(stopGrace):
		z.cmd.Process.Kill()
		<-z.exited
		return fmt.Errorf("zeishd did not exit within %v of SIGTERM; killed", stopGrace)
	}
}

// PID is zeishd's process id (0 when it is not running).
func (z *Zeishd) PID() int {
	if z.cmd == nil {
		return 0
	}
	return z.cmd.Process.Pid
}

// Kill ends zeishd with SIGKILL, as a crash would: nothing of it runs
// after, its VMs keep running.
func (z *Zeishd) Kill() {
	if z.cmd == nil {
		return
	}
	z.cmd.Process.Kill()
	<-z.exited
	z.cmd = nil
}

// AdminKey is the admin API key zeishd writes into its data dir.
func (z *Zeishd) AdminKey() (string, error) {
	key, err := os.ReadFile(filepath.Join(z.DataDir, "admin.key"))
	return strings.TrimSpace(string(key)), err
}

// freeAddr finds a loopback port nobody listens on right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// LogBuffer collects a process's output. exec writes stdout and stderr from
// goroutines of its own while the caller reads, hence the lock.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail is the last n bytes, marked as cut when there was more.
func (l *LogBuffer) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ImageRAMFiles lists the RAM files that the images in a zeishd data dir
// name (in each image's image.json), so tests and the bench can look at what
// images hold on the host.
func ImageRAMFiles(dataDir string) []string {
	metas, _ := filepath.Glob(filepath.Join(dataDir, "images", "*", "image.json"))
	var files []string
	for _, m := range metas {
		var meta struct {
			VM *struct {
				MemFile string `json:"mem_file"`
			} `json:"vm"`
		}
		if b, err := os.ReadFile(m); err == nil && json.Unmarshal(b, &meta) == nil && meta.VM != nil && meta.VM.MemFile != "" {
			files = append(files, meta.VM.MemFile)
		}
	}
	return files
}
