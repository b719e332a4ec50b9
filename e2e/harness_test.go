// Package e2e proves zeish's features end to end: real zeishd and zeishctl
// binaries, real QEMU VMs booted from the real base template, driven through
// the public API.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testenv"
	zeish "github.com/zeish/zeish/sdk/go"
)

// bin holds the binaries built once for the package.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zeish-e2e-bin-")
	if err != nil {
		panic(err)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	pg.Stop()
	os.Exit(code)
}

var buildOnce sync.Once
var buildErr error

func buildBinaries(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() { buildErr = testenv.GoBuild(context.Background(), bin, "zeishd", "zeishctl") })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// server is one zeishd process with its own data dir.
type server struct {
	t       *testing.T
	zeishd  *testenv.Zeishd
	dataDir string
	addr    string
	key     string
	client  *zeish.Client
	seen    map[string]bool
}

// startServer runs zeishd on a fresh data dir. The base template comes from
// the shared test cache, so it is built once across runs. On cleanup every
// sandbox is deleted, zeishd stops, and any VM process or RAM file it left is
// removed (and reported as a failure).
func startServer(t *testing.T, extraEnv ...string) *server {
	t.Helper()
	return startServerWith(t, nil, extraEnv...)
}

// startServerWith is startServer with a say on how zeishd runs (setup).
func startServerWith(t *testing.T, setup func(*testenv.Zeishd), extraEnv ...string) *server {
	t.Helper()
	testenv.RequireQEMU(t)
	buildBinaries(t)
	tpl := testenv.BaseTemplate(t) // builds sandboxd + template into the shared cache
	dataDir, err := os.MkdirTemp("", "zeish-e2e-data-")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, dataDir: dataDir, seen: map[string]bool{}}
	s.zeishd = &testenv.Zeishd{
		Bin:     filepath.Join(bin, "zeishd"),
		DataDir: dataDir,
		Env: append([]string{
			"ZEISH_SANDBOXD=" + testenv.SandboxdBinary(t),
			"ZEISH_TEMPLATE_CACHE=" + filepath.Dir(tpl.Dir),
			"ZEISH_LOG_LEVEL=debug",
		}, extraEnv...),
	}
	if setup != nil {
		setup(s.zeishd)
	}
	t.Cleanup(s.cleanup)
	s.start()
	s.addr = s.zeishd.Addr // kept across restarts
	if s.key, err = s.zeishd.AdminKey(); err != nil {
		t.Fatal(err)
	}
	s.client = zeish.NewClient(s.url(), s.key, zeish.WithHTTPClient(&http.Client{Transport: newValidatingTransport(t)}))
	return s
}

func (s *server) url() string { return "http://" + s.addr + api.BasePath }

// start launches zeishd and waits for /healthz.
func (s *server) start() {
	s.t.Helper()
	if err := s.zeishd.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// stop sends SIGTERM and waits for zeishd to exit.
func (s *server) stop() {
	s.t.Helper()
	s.remember()
	if err := s.zeishd.Stop(); err != nil {
		s.t.Error(err)
	}
}

func (s *server) logText() string { return s.zeishd.Log.String() }

func (s *server) cleanup() {
	t := s.t
	s.remember()
	if s.zeishd.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		list, err := s.client.ListSandboxes(ctx, zeish.ListOptions{})
		if err == nil {
			for _, sb := range list {
				if _, err := s.client.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
					t.Errorf("cleanup: delete %s: %v", sb.ID, err)
				}
			}
		}
		cancel()
		if t.Failed() {
			t.Logf("zeishd log:\n%s", s.zeishd.Log.Tail(8000))
		}
		s.stop()
	}
	if pids := procscan.Under(s.dataDir); len(pids) > 0 {
		t.Errorf("cleanup: VM processes left behind: %v", pids)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if left := s.images(); len(left) > 0 {
		t.Errorf("cleanup: images left after deleting every sandbox: %v", left)
		for _, f := range testenv.ImageRAMFiles(s.dataDir) {
			os.Remove(f) // outside the data dir: it would outlive the test
		}
	}
	if files := s.shmFiles(); len(files) > 0 {
		t.Errorf("cleanup: RAM files left in /dev/shm: %v", files)
		for _, f := range files {
			os.Remove(f)
		}
	}
	os.RemoveAll(s.dataDir)
}

// images lists the image folders of the server and their RAM files.
func (s *server) images() []string {
	dirs, _ := filepath.Glob(filepath.Join(s.dataDir, "images", "*"))
	return append(dirs, testenv.ImageRAMFiles(s.dataDir)...)
}

// shmFiles lists guest RAM files of every sandbox this server ever had.
func (s *server) shmFiles() []string {
	var out []string
	for id := range s.seen {
		m, _ := filepath.Glob("/dev/shm/*" + id + "*")
		out = append(out, m...)
	}
	return out
}

// remember records the ids of every sandbox the server knows, so cleanup can
// look for their files even after zeishd stopped.
func (s *server) remember() {
	if !s.zeishd.Running() {
		return
	}
	var list api.SandboxList
	req, _ := http.NewRequest("GET", s.url()+"/public/sandboxes?include_destroyed=true", nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&list)
	for _, sb := range list.Sandboxes {
		s.seen[sb.ID] = true
	}
}

// do sends a raw API request (for shapes the SDK would never send) and
// decodes the JSON answer into out when it is non-nil.
func (s *server) do(t *testing.T, method, path, token string, body any, out any) int {
	t.Helper()
	var text string
	switch b := body.(type) {
	case nil:
	case string:
		text = b
	default:
		j, _ := json.Marshal(b)
		text = string(j)
	}
	status, _, raw := s.raw(t, method, path, token, text)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return status
}

// raw sends one request and returns status, headers and body as they came.
func (s *server) raw(t *testing.T, method, path, token, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	u := path
	if !strings.HasPrefix(path, "http") {
		u = "http://" + s.addr + path
	}
	req, _ := http.NewRequest(method, u, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: newValidatingTransport(t)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// procStatus is zeishd's /proc/PID/status line for field ("VmRSS: 1234
// kB"), or "field ?" when it cannot be read.
func (s *server) procStatus(field string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.zeishd.PID()))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return field + " ?"
}

// sandboxUsage is what the account's usage report says of sandbox id so
// far (running time, bytes in and out, …).
func sandboxUsage(ctx context.Context, t *testing.T, c *zeish.Client, id string) api.Usage {
	t.Helper()
	rep, err := c.Usage(ctx, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rep.Sandboxes {
		if u.SandboxID == id {
			return u.Usage
		}
	}
	t.Fatalf("no usage of %s in %+v", id, rep.Sandboxes)
	return api.Usage{}
}

// metric reads one sample of the server's /metrics: the first of metric
// name whose labels contain label ("" for any); -1 when there is none.
func (s *server) metric(t *testing.T, name, label string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		series, value, ok := strings.Cut(line, " ")
		labels, found := strings.CutPrefix(series, name)
		if !ok || !found || (labels != "" && labels[0] != '{') || !strings.Contains(labels, label) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric %s: %q", name, line)
		}
		return v
	}
	return -1
}
