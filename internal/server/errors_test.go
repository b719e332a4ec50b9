package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/zeish/zeish/internal/control"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/node"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// The one mapping (errorDetail): status and code from the class; a 4xx
// shows its message, a 5xx a fixed sentence and the request id.
func TestErrorDetail(t *testing.T) {
	const secret = "qemu-system-x86_64: -object memory-backend-file,mem-path=/dev/shm/zeish-sbx_1: Permission denied"
	cases := []struct {
		name    string
		err     error
		status  int
		code    string
		message string // "" : the fixed 5xx sentence
	}{
		{"client error keeps its message", fmt.Errorf("snapshot %q exists: %w", "a", errdefs.ErrNameTaken), 409, "name_taken", `snapshot "a" exists`},
		{"refusal of the lifecycle", refusal(), 409, "invalid_state", "sandbox sbx_1 is starting; stop needs it running or paused"},
		{"unclassified is internal", errors.New(secret), 500, "internal", ""},
		{"internal hides its text", fmt.Errorf("%s: %w", secret, errdefs.ErrInternal), 500, "internal", ""},
		{"unavailable hides its text", fmt.Errorf("%s: %w", secret, errdefs.ErrUnavailable), 503, "unavailable", ""},
		{"a driver's invalid_argument is internal", errdefs.Reclass(fmt.Errorf("vm spec: %w: %s", errdefs.ErrInvalidArgument, secret), errdefs.ErrInternal), 500, "internal", ""},
		{"a store outage is unavailable", storeErr(errors.New("dial tcp 10.1.2.3:5432: connect: connection refused")), 503, "unavailable", ""},
		{"a store's own class stays", storeErr(fmt.Errorf("sandbox x: %w", errdefs.ErrNotFound)), 404, "not_found", "sandbox x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/x", nil)
			status, d := errorDetail(w, r, c.err)
			if status != c.status || d.Code != c.code {
				t.Fatalf("got %d %s, want %d %s", status, d.Code, c.status, c.code)
			}
			if d.RequestID == "" || d.RequestID != w.Header().Get(requestIDHeader) {
				t.Fatalf("request id %q, header %q", d.RequestID, w.Header().Get(requestIDHeader))
			}
			if c.message != "" && d.Message != c.message {
				t.Fatalf("message %q, want %q", d.Message, c.message)
			}
			if status >= 500 && (d.Message != publicText(errdefs.ByCode(c.code)) || strings.Contains(d.Message, "qemu") || strings.Contains(d.Message, "10.1.2.3")) {
				t.Fatalf("5xx message %q is not the fixed one", d.Message)
			}
		})
	}
}

func refusal() error {
	_, err := sandbox.NextFor("sbx_1", sandbox.StateStarting, sandbox.OpStop)
	return err
}

// logBuffer captures slog's default logger for one test.
func logBuffer(t *testing.T) *testenv.LogBuffer {
	t.Helper()
	buf := &testenv.LogBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

// outageStore is a store whose reads of sandboxes fail as a lost database does.
type outageStore struct {
	store.Store
	down bool
}

var errOutage = errors.New("dial tcp 10.1.2.3:5432: connect: connection refused")

func (s *outageStore) GetSandbox(ctx context.Context, id string) (*store.SandboxRecord, error) {
	if s.down {
		return nil, errOutage
	}
	return s.Store.GetSandbox(ctx, id)
}

// errorsFixture is a server on a SQLite store (behind outageStore), an
// account with a key, and one running sandbox on a node whose driver fails
// every Pause with a driver's invalid_argument in QEMU's words.
type errorsFixture struct {
	ts  *httptest.Server
	st  *outageStore
	key string
	sb  *store.SandboxRecord
}

// qemuWords is what the failing driver says.
const qemuWords = "vm spec: invalid_argument: qemu-system-x86_64: -m 512: memory size too small"

type failingDriver struct{ vmm.Driver }

func (failingDriver) Capabilities() vmm.Capabilities { return vmm.Capabilities{Name: "failing"} }
func (failingDriver) Pause(context.Context, *vmm.Handle) error {
	return fmt.Errorf("vm spec: %w: qemu-system-x86_64: -m 512: memory size too small", errdefs.ErrInvalidArgument)
}

func (failingDriver) DialAgent(context.Context, *vmm.Handle) (net.Conn, error) {
	return nil, fmt.Errorf("vm agent: %w: qemu is not running", errdefs.ErrUnavailable)
}

func (failingDriver) Alive(*vmm.Handle) bool { return false }

func newErrorsFixture(t *testing.T) *errorsFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	sq, err := sqlite.Open(ctx, filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	st := &outageStore{Store: sq}
	acct := sandbox.NewID(sandbox.PrefixAccount)
	if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: "team", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	key, hash := control.NewAPIKey()
	if err := st.CreateAPIKey(ctx, store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: acct, Hash: hash, Prefix: key[:8], CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sb := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: "a", AccountID: acct,
		State: sandbox.StateRunning, CreatedAt: time.Now()}}
	if err := sb.SetHandle(&vmm.Handle{Spec: vmm.Spec{ID: sb.ID, Dir: filepath.Join(dir, "vm")}, PID: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSandboxes(ctx, sb); err != nil {
		t.Fatal(err)
	}
	n := node.New(node.Options{ID: "n1", DataDir: dir, Store: st, Driver: failingDriver{}})
	t.Cleanup(n.Close)
	s, err := NewForTest(t, st, n, dir), error(nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &errorsFixture{ts: ts, st: st, key: key, sb: sb}
}

func (f *errorsFixture) do(t *testing.T, method, path, bearer, body string) (*http.Response, api.ErrorBody) {
	t.Helper()
	req, _ := http.NewRequest(method, f.ts.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.ErrorBody
	json.NewDecoder(resp.Body).Decode(&e)
	return resp, e
}

// checkServerError checks a 5xx answer: the code, the request id in the
// body and the header, no internal words in the body, and one log line
// with the same id holding the detail.
func checkServerError(t *testing.T, resp *http.Response, e api.ErrorBody, logs *testenv.LogBuffer, status int, code, detail string, hidden ...string) {
	t.Helper()
	if resp.StatusCode != status || e.Error.Code != code {
		t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, e.Error, status, code)
	}
	id := resp.Header.Get(requestIDHeader)
	if id == "" || e.Error.RequestID != id {
		t.Fatalf("request id: header %q, body %q", id, e.Error.RequestID)
	}
	for _, h := range hidden {
		if strings.Contains(e.Error.Message, h) {
			t.Fatalf("the body leaks %q: %q", h, e.Error.Message)
		}
	}
	found := false
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"request_id":"`+id+`"`) && strings.Contains(line, detail) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no log line with request_id %s and %q:\n%s", id, detail, logs.String())
	}
}

// A store outage in the data plane answers 503, not 401: the token is good,
// the store is not.
func TestDataPlaneStoreOutage(t *testing.T) {
	logs := logBuffer(t)
	f := newErrorsFixture(t)
	resp, e := f.do(t, "POST", api.BasePath+"/public/sandboxes/"+f.sb.ID+"/access", f.key, `{}`)
	var a api.Access
	if resp.StatusCode != 200 {
		t.Fatalf("access: %d %+v", resp.StatusCode, e)
	}
	req, _ := http.NewRequest("POST", f.ts.URL+api.BasePath+"/public/sandboxes/"+f.sb.ID+"/access", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+f.key)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(r2.Body).Decode(&a)
	r2.Body.Close()

	f.st.down = true
	for _, path := range []string{"/files/stat?path=/", "/ports/8080/"} {
		resp, e = f.do(t, "GET", api.DataPath+"/sandboxes/"+f.sb.ID+path, a.Token, "")
		checkServerError(t, resp, e, logs, 503, "unavailable", "connection refused", "10.1.2.3", "dial")
	}
	// The control plane too: the sandbox cannot be read, it is not "not found".
	resp, e = f.do(t, "GET", api.BasePath+"/public/sandboxes/"+f.sb.ID, f.key, "")
	checkServerError(t, resp, e, logs, 503, "unavailable", "connection refused", "10.1.2.3")

	// Back up: the same token is good again (stat-ing a port of a sandbox
	// without a network is a 409 of the node, not a 401).
	f.st.down = false
	resp, e = f.do(t, "GET", api.DataPath+"/sandboxes/"+f.sb.ID+"/ports/8080/", a.Token, "")
	if resp.StatusCode != 409 || e.Error.Code != "invalid_state" {
		t.Fatalf("after the outage: %d %+v", resp.StatusCode, e.Error)
	}
}

// A driver's validation error reaches the client as 500 internal with the
// request id, never as a 400 in QEMU's words; the log has the words.
func TestDriverErrorIsInternal(t *testing.T) {
	logs := logBuffer(t)
	f := newErrorsFixture(t)
	resp, e := f.do(t, "POST", api.BasePath+"/public/sandboxes/"+f.sb.ID+"/pause", f.key, `{}`)
	checkServerError(t, resp, e, logs, 500, "internal", "memory size too small", "qemu", "vm spec", "-m 512")
	// A 4xx keeps its message and carries the id too.
	resp, e = f.do(t, "POST", api.BasePath+"/public/sandboxes/"+f.sb.ID+"/resume", f.key, `{}`)
	if resp.StatusCode != 409 || e.Error.Code != "invalid_state" || !strings.Contains(e.Error.Message, "resume needs it paused") ||
		e.Error.RequestID == "" || e.Error.RequestID != resp.Header.Get(requestIDHeader) {
		t.Fatalf("resume of a running sandbox: %d %+v", resp.StatusCode, e.Error)
	}
}

// publicText is the fixed sentence a client reads of a server error.
func publicText(e *errdefs.Error) string {
	_, msg := errdefs.Public(e)
	return msg
}
