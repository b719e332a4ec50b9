package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

var sbx1 = sandbox.Sandbox{
	ID: "sbx_1", Name: "brave-otter-42", State: sandbox.StateRunning, Template: "base",
	VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048, Env: map[string]string{}, Metadata: map[string]string{},
	CreatedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
}

// fake is a zeishd stand-in with just enough behaviour for the CLI: one
// sandbox sbx_1, an exec whose result is chosen by argv[0], and an in-memory
// file store.
type fake struct {
	*httptest.Server
	mu         sync.Mutex
	lastCreate api.CreateSandboxRequest
	lastQuery  string
	files      map[string][]byte
	calls      []call // every control-plane request, in order
	holdEvents bool   // keep the event stream open after its events, as zeishd does
}

// call is what the fake saw of one control-plane request.
type call struct {
	method, path, query, body string
}

func (f *fake) log() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

func newFake(t *testing.T) *fake {
	f := &fake{files: map[string][]byte{}}
	mux := http.NewServeMux()
	send := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, status int, code, msg string) {
		send(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
	}
	authed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer good-key" {
				fail(w, 401, "unauthenticated", "invalid API key")
				return
			}
			// sbx_2 and sbx_3 are sbx_1's forks.
			if id := r.PathValue("id"); id != "" && id != "sbx_1" && id != "sbx_2" && id != "sbx_3" {
				fail(w, 404, "not_found", "no sandbox "+id)
				return
			}
			if snp := r.PathValue("snp"); snp != "" && snp != "snp_1" {
				fail(w, 404, "not_found", "no snapshot "+snp)
				return
			}
			var body []byte
			if r.Header.Get("Content-Type") == "application/json" {
				body, _ = io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			f.mu.Lock()
			f.lastQuery = r.URL.RawQuery
			f.calls = append(f.calls, call{r.Method, r.URL.Path, r.URL.RawQuery, string(body)})
			f.mu.Unlock()
			h(w, r)
		}
	}
	data := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer data-token" {
				fail(w, 401, "unauthenticated", "bad token")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		send(w, 200, api.Health{Status: "ok", Version: "0.1.0", Accel: "tcg", VMM: "qemu"})
	})
	mux.HandleFunc("POST /api/v1/public/sandboxes", authed(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&f.lastCreate)
		f.mu.Unlock()
		send(w, 202, sbx1)
	}))
	mux.HandleFunc("GET /api/v1/public/sandboxes", authed(func(w http.ResponseWriter, _ *http.Request) {
		send(w, 200, api.SandboxList{Sandboxes: []sandbox.Sandbox{sbx1}})
	}))
	mux.HandleFunc("GET /api/v1/public/sandboxes/{id}", authed(func(w http.ResponseWriter, _ *http.Request) { send(w, 200, sbx1) }))
	mux.HandleFunc("DELETE /api/v1/public/sandboxes/{id}", authed(func(w http.ResponseWriter, _ *http.Request) { send(w, 202, sbx1) }))
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/wait", authed(func(w http.ResponseWriter, _ *http.Request) { send(w, 200, sbx1) }))
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/access", authed(func(w http.ResponseWriter, r *http.Request) {
		send(w, 200, api.Access{URL: "/data/v1/sandboxes/" + r.PathValue("id"), Token: "data-token", ExpiresAt: time.Now().Add(15 * time.Minute)})
	}))
	lifecycleRoutes(f, mux, authed, send)
	mux.HandleFunc("GET /api/v1/public/sandboxes/{id}/git", authed(func(w http.ResponseWriter, _ *http.Request) { send(w, 200, gitStatus1) }))
	mux.HandleFunc("POST /data/v1/sandboxes/{id}/exec", data(func(w http.ResponseWriter, r *http.Request) {
		var req api.ExecRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		enc := json.NewEncoder(w)
		res := guest.ExecResult{PID: 9}
		switch req.Argv[0] {
		case "cat":
			_ = enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: req.Stdin})
		case "both":
			_ = enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: []byte("to out\n")})
			_ = enc.Encode(api.ExecEvent{Type: api.EventStderr, Data: []byte("to err\n")})
		case "exit3":
			res.ExitCode = 3
		case "killed":
			res.ExitCode, res.Signal = -1, "SIGTERM"
		case "slow":
			res.ExitCode, res.Signal, res.TimedOut = -1, "KILL", true
		case "missing":
			_ = enc.Encode(api.ExecEvent{Type: api.EventError, Error: &api.ErrorDetail{Code: "file_not_found", Message: "missing: not found"}})
			return
		}
		_ = enc.Encode(api.ExecEvent{Type: api.EventExit, Result: &res})
	}))
	mux.HandleFunc("PUT /data/v1/sandboxes/{id}/files", data(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p := r.URL.Query().Get("path")
		f.mu.Lock()
		f.files[p] = b
		f.mu.Unlock()
		send(w, 200, guest.FileInfo{Path: p, Name: filepath.Base(p), Size: int64(len(b)), Mode: "-rw-r--r--", Perm: 0o644})
	}))
	mux.HandleFunc("GET /data/v1/sandboxes/{id}/files", data(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.files[r.URL.Query().Get("path")]
		f.mu.Unlock()
		if !ok {
			fail(w, 404, "file_not_found", "no such file")
			return
		}
		_, _ = w.Write(b)
	}))
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

type result struct {
	code           int
	stdout, stderr string
}

// zeishctl runs the CLI against url with the given stdin (nil: a terminal).
func zeishctl(t *testing.T, url string, stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	s := streams{in: stdin, inIsTerminal: stdin == nil, out: &out, err: &errOut}
	full := append([]string{"--api-url", url + "/api/v1", "--api-key", "good-key"}, args...)
	code := run(context.Background(), full, s)
	return result{code, out.String(), errOut.String()}
}

func TestExecPassesExitCodeAndStreams(t *testing.T) {
	f := newFake(t)
	tests := []struct {
		name             string
		stdin            io.Reader
		args             []string
		wantCode         int
		wantOut, wantErr string
	}{
		{"success keeps stdout and stderr apart", nil, []string{"sbx_1", "--", "both"}, 0, "to out\n", "to err\n"},
		{"exit code passes through", nil, []string{"sbx_1", "--", "exit3"}, 3, "", ""},
		{"signal is 128+n", nil, []string{"sbx_1", "--", "killed"}, 143, "", ""},
		{"timeout is 124", nil, []string{"sbx_1", "--timeout", "1s", "--", "slow", "-x"}, 124, "", ""},
		{"piped stdin is forwarded", strings.NewReader("piped"), []string{"sbx_1", "cat"}, 0, "piped", ""},
		{"no-stdin ignores the pipe", strings.NewReader("piped"), []string{"sbx_1", "--no-stdin", "cat"}, 0, "", ""},
		{"exec error event", nil, []string{"sbx_1", "missing"}, 1, "", "error: missing: not found (code file_not_found)\n"},
		{"unknown sandbox", nil, []string{"sbx_9", "--", "true"}, 1, "", "error: no sandbox sbx_9 (code not_found)\nhint: `zeishctl sandboxes list` shows your sandboxes\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := zeishctl(t, f.URL, tt.stdin, append([]string{"exec"}, tt.args...)...)
			if r.code != tt.wantCode || r.stdout != tt.wantOut || r.stderr != tt.wantErr {
				t.Errorf("got code %d stdout %q stderr %q, want %d %q %q", r.code, r.stdout, r.stderr, tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
}

func TestJSONOutputIsExactlyTheObject(t *testing.T) {
	f := newFake(t)
	tests := []struct {
		args []string
		want any
	}{
		{[]string{"sandboxes", "create", "-o", "json"}, sbx1},
		{[]string{"sbx", "create", "--wait", "--size", "medium", "-o", "json"}, sbx1},
		{[]string{"-o", "json", "sandboxes", "get", "sbx_1"}, sbx1},
		{[]string{"sandboxes", "wait", "sbx_1", "-o", "json"}, sbx1},
		{[]string{"sandboxes", "delete", "sbx_1", "--wait", "-o", "json"}, sbx1},
		{[]string{"sandboxes", "list", "-o", "json"}, api.SandboxList{Sandboxes: []sandbox.Sandbox{sbx1}}},
		{[]string{"health", "-o", "json"}, api.Health{Status: "ok", Version: "0.1.0", Accel: "tcg", VMM: "qemu"}},
		{[]string{"sandboxes", "pause", "sbx_1", "-o", "json"}, sbx1},
		{[]string{"sandboxes", "start", "sbx_1", "--wait", "-o", "json"}, sbx1},
		{[]string{"sandboxes", "clone", "sbx_1", "--count", "2", "-o", "json"}, cloned},
		{[]string{"-o", "json", "sbx", "fork", "sbx_1", "--wait"}, cloned},
		{[]string{"sandboxes", "lineage", "sbx_1", "-o", "json"}, lineage1},
		{[]string{"git", "sbx_1", "-o", "json"}, gitStatus1},
		{[]string{"snapshots", "create", "sbx_1", "--name", "n", "-o", "json"}, snp1},
		{[]string{"snapshots", "list", "sbx_1", "-o", "json"}, api.SnapshotList{Snapshots: []sandbox.Snapshot{snp1}}},
		{[]string{"snapshots", "get", "snp_1", "-o", "json"}, snp1},
		{[]string{"snapshots", "restore", "snp_1", "--wait", "-o", "json"}, restored},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := zeishctl(t, f.URL, nil, tt.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("code %d stderr %q", r.code, r.stderr)
			}
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			var got json.RawMessage
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
			}
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				t.Errorf("more than one JSON value on stdout:\n%s", r.stdout)
			}
			want, _ := json.Marshal(tt.want)
			var a, b any
			_ = json.Unmarshal(got, &a)
			_ = json.Unmarshal(want, &b)
			if ga, _ := json.Marshal(a); string(ga) != mustMarshal(b) {
				t.Errorf("got %s\nwant %s", ga, want)
			}
		})
	}
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCreateSendsFlags(t *testing.T) {
	f := newFake(t)
	r := zeishctl(t, f.URL, nil, "sbx", "create", "--template", "base", "--name", "n1", "--size", "large",
		"--memory-mib", "1024", "--vcpus", "2", "--disk-mib", "4096", "--env", "A=1", "--env", "B=x=y", "--wait")
	if r.code != 0 {
		t.Fatalf("code %d: %s", r.code, r.stderr)
	}
	want := api.CreateSandboxRequest{Template: "base", Name: "n1", Size: "large", MemoryMiB: 1024, VCPUs: 2, DiskMiB: 4096,
		Env: map[string]string{"A": "1", "B": "x=y"}}
	if mustMarshal(f.lastCreate) != mustMarshal(want) || f.lastQuery != "wait=true" {
		t.Errorf("sent %+v query %q", f.lastCreate, f.lastQuery)
	}
	if !strings.HasPrefix(r.stdout, "ID ") || !strings.Contains(r.stdout, "sbx_1") || !strings.Contains(r.stdout, "512MiB") {
		t.Errorf("text output:\n%s", r.stdout)
	}
}

func TestErrorFormatting(t *testing.T) {
	f := newFake(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	tests := []struct {
		name       string
		url        string
		args       []string
		wantCode   int
		wantStderr []string // substrings, in order
	}{
		{"not found", f.URL, []string{"sandboxes", "get", "sbx_9"}, 1,
			[]string{"error: no sandbox sbx_9 (code not_found)\n", "hint: "}},
		{"bad key", f.URL, []string{"--api-key", "wrong", "sandboxes", "list"}, 1,
			[]string{"error: invalid API key (code unauthenticated)\n", "hint: set ZEISH_API_KEY or check ", "admin.key\n"}},
		{"zeishd down", deadURL, []string{"sandboxes", "list"}, 1,
			[]string{"connection refused", "hint: is zeishd running? start it with `make run`\n"}},
		{"unknown flag", f.URL, []string{"sandboxes", "list", "--bogus"}, 2,
			[]string{"error: unknown flag: --bogus\n", "run 'zeishctl sandboxes list --help' for usage\n"}},
		{"missing argument", f.URL, []string{"sandboxes", "get"}, 2, []string{"error: accepts 1 arg(s)"}},
		{"bad env", f.URL, []string{"sandboxes", "create", "--env", "NOEQUALS"}, 2, []string{"--env wants KEY=VALUE"}},
		{"bad output", f.URL, []string{"-o", "yaml", "health"}, 2, []string{"--output must be text or json"}},
		{"unknown command", f.URL, []string{"sandboxes", "frobnicate"}, 2, []string{`unknown command "frobnicate"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := zeishctl(t, tt.url, nil, tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("code %d, want %d (stderr %q)", r.code, tt.wantCode, r.stderr)
			}
			rest := r.stderr
			for _, s := range tt.wantStderr {
				i := strings.Index(rest, s)
				if i < 0 {
					t.Fatalf("stderr %q lacks %q", r.stderr, s)
				}
				rest = rest[i+len(s):]
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty on error: %q", r.stdout)
			}
		})
	}
}

func TestFilesPutGet(t *testing.T) {
	f := newFake(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(local, []byte("file body"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := zeishctl(t, f.URL, nil, "files", "put", "sbx_1", local, "/tmp/in.txt"); r.code != 0 || r.stdout != "wrote 9 bytes to /tmp/in.txt\n" {
		t.Fatalf("put: %+v", r)
	}
	if r := zeishctl(t, f.URL, strings.NewReader("from stdin"), "files", "put", "sbx_1", "-", "/tmp/s.txt"); r.code != 0 {
		t.Fatalf("put from stdin: %+v", r)
	}
	if r := zeishctl(t, f.URL, nil, "files", "get", "sbx_1", "/tmp/s.txt", "-"); r.stdout != "from stdin" {
		t.Fatalf("get to stdout: %+v", r)
	}
	out := filepath.Join(dir, "out.txt")
	if r := zeishctl(t, f.URL, nil, "files", "get", "sbx_1", "/tmp/in.txt", out); r.code != 0 {
		t.Fatalf("get: %+v", r)
	}
	if b, _ := os.ReadFile(out); string(b) != "file body" {
		t.Errorf("downloaded %q", b)
	}
	r := zeishctl(t, f.URL, nil, "files", "get", "sbx_1", "/nope", filepath.Join(dir, "nope"))
	if r.code != 1 || !strings.Contains(r.stderr, "(code file_not_found)") {
		t.Errorf("missing file: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed download left a file behind")
	}
}

// `zeishctl keys e2b` prints the E2B form of a key (computed here, the
// server is not asked): given, or the CLI's own; a string that is no key is
// an error.
func TestKeysE2BForm(t *testing.T) {
	const key = "zk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX"
	r := zeishctl(t, "http://127.0.0.1:1", nil, "keys", "e2b", key)
	if r.code != 0 || r.stdout != "e2b_000102030405060708090a0b0c0d0e0f1011121314151617\n" {
		t.Fatalf("code %d out %q err %q", r.code, r.stdout, r.stderr)
	}
	if r := zeishctl(t, "http://127.0.0.1:1", nil, "keys", "e2b"); r.code == 0 || !strings.Contains(r.stderr, "not a zeish API key") {
		t.Errorf("the CLI's key good-key: code %d err %q", r.code, r.stderr)
	}
}
