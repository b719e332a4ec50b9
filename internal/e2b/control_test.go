package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

// fakeApp answers list, get and snapshots from a fixed set, and
// unauthenticated for any key but "good"; calls it does not define are not
// expected (the embedded nil App panics).
type fakeApp struct {
	App
	sandboxes []sandbox.Sandbox
	boxes     map[string]sandbox.Sandbox // what Peek reads
	asked     []string                   // OpenEnvd's and ResumeForOwner's
}

func (a *fakeApp) Authenticate(_ context.Context, key string) (control.Caller, error) {
	if key != "good" {
		return control.Caller{}, fmt.Errorf("bad key: %w", errdefs.ErrUnauthenticated)
	}
	return control.Caller{Account: api.Account{ID: "acc_1"}}, nil
}

func (a *fakeApp) List(context.Context, control.Caller, control.ListFilter) (api.SandboxList, error) {
	return api.SandboxList{Sandboxes: a.sandboxes}, nil
}

func (a *fakeApp) Sandbox(_ context.Context, _ control.Caller, ref string) (sandbox.Sandbox, error) {
	for _, sb := range a.sandboxes {
		if sb.ID == ref {
			return sb, nil
		}
	}
	return sandbox.Sandbox{}, fmt.Errorf("no such sandbox: %w", errdefs.ErrNotFound)
}

func (a *fakeApp) CreateSnapshot(_ context.Context, _ control.Caller, ref string, _ api.CreateSnapshotRequest) (sandbox.Snapshot, error) {
	return sandbox.Snapshot{ID: "snp_new", Name: "snapshot-1", SandboxID: ref}, nil
}

func (a *fakeApp) Snapshots(_ context.Context, _ control.Caller, ref string) (api.SnapshotList, error) {
	list := api.SnapshotList{Snapshots: []sandbox.Snapshot{}}
	if ref == "sbx_a" {
		list.Snapshots = append(list.Snapshots, sandbox.Snapshot{ID: "snp_1", Name: "one", SandboxID: ref})
	}
	return list, nil
}

func (a *fakeApp) DeleteSnapshot(_ context.Context, _ control.Caller, ref control.SnapshotRef) error {
	if ref.Snapshot != "snp_1" {
		return fmt.Errorf("no such snapshot: %w", errdefs.ErrNotFound)
	}
	return nil
}

func (a *fakeApp) TokenUntil(context.Context, control.Caller, string, time.Time) (string, error) {
	return "tok", nil
}

func (a *fakeApp) SandboxTokens(_ context.Context, id string, exps []time.Time) ([]string, error) {
	if id != "sbx_signed" {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	var out []string
	for _, exp := range exps {
		out = append(out, fmt.Sprintf("tok-%d", exp.Unix()))
	}
	return out, nil
}

func (a *fakeApp) Peek(_ context.Context, id string) (sandbox.Sandbox, error) {
	if sb, ok := a.boxes[id]; ok {
		return sb, nil
	}
	return sandbox.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
}

func (a *fakeApp) ResumeForOwner(_ context.Context, id string, timeout int) error {
	a.asked = append(a.asked, fmt.Sprintf("resume %s %d", id, timeout))
	return nil
}

func (a *fakeApp) CheckToken(_ context.Context, id, token string) error {
	if token != "good-token" {
		return fmt.Errorf("bad token: %w", errdefs.ErrUnauthenticated)
	}
	return nil
}

func (a *fakeApp) TemplateKnown(_ context.Context, _ control.Caller, name string) error {
	if name != "base" {
		return errdefs.ErrUnknownTemplate
	}
	return nil
}

func (a *fakeApp) OpenEnvd(_ context.Context, token, id string) (*guest.Client, func(), error) {
	a.asked = append(a.asked, id+" "+token)
	return nil, nil, fmt.Errorf("sandbox %s is gone: %w", id, errdefs.ErrUnavailable)
}

func testFacade() *Facade {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(id string, st sandbox.State, age int, md map[string]string) sandbox.Sandbox {
		return sandbox.Sandbox{ID: id, State: st, Template: "base", CreatedAt: t0.Add(time.Duration(age) * time.Minute), Metadata: md}
	}
	return New(Options{App: &fakeApp{sandboxes: []sandbox.Sandbox{
		mk("sbx_a", sandbox.StateRunning, 1, map[string]string{"team": "x y", "k": "1"}),
		mk("sbx_b", sandbox.StatePaused, 2, map[string]string{"team": "x y"}),
		mk("sbx_c", sandbox.StateStopped, 3, nil),
		mk("sbx_d", sandbox.StateDestroyed, 4, nil),
		mk("sbx_e", sandbox.StateStarting, 5, nil),
		mk("sbx_f", sandbox.StateError, 6, nil),
	}}})
}

func serve(f *Facade, method, target, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	w := httptest.NewRecorder()
	f.Handler().ServeHTTP(w, req)
	return w
}

func ids(t *testing.T, w *httptest.ResponseRecorder) []string {
	t.Helper()
	var list []struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	out := []string{}
	for _, x := range list {
		out = append(out, x.SandboxID)
	}
	return out
}

// Sandbox.list as E2B's API answers it: filters (metadata, state,
// template, startedAfter at or after), newest first unless order=asc, pages
// of limit with a keyset nextToken (a removed sandbox does not break it).
func TestList(t *testing.T) {
	f := testFacade()
	// The SDK encodes each key and value, then the pairs as a query.
	team := "metadata=" + "team%3Dx%252520y"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tok := func(id string, age int) string {
		return cursor{t0.Add(time.Duration(age) * time.Minute), id}.token()
	}
	for _, tc := range []struct {
		target string
		want   []string
		next   string
	}{
		{"/e2b/v2/sandboxes", []string{"sbx_e", "sbx_c", "sbx_b", "sbx_a"}, ""},
		{"/e2b/v2/sandboxes?order=desc", []string{"sbx_e", "sbx_c", "sbx_b", "sbx_a"}, ""},
		{"/e2b/v2/sandboxes?order=asc", []string{"sbx_a", "sbx_b", "sbx_c", "sbx_e"}, ""},
		{"/e2b/v2/sandboxes?state=running", []string{"sbx_e", "sbx_a"}, ""},
		{"/e2b/v2/sandboxes?state=paused", []string{"sbx_c", "sbx_b"}, ""},
		{"/e2b/v2/sandboxes?" + team, []string{"sbx_b", "sbx_a"}, ""},
		{"/e2b/v2/sandboxes?limit=2", []string{"sbx_e", "sbx_c"}, tok("sbx_c", 3)},
		{"/e2b/v2/sandboxes?limit=2&nextToken=" + tok("sbx_c", 3), []string{"sbx_b", "sbx_a"}, ""},
		{"/e2b/v2/sandboxes?limit=1&state=paused&nextToken=" + tok("sbx_c", 3), []string{"sbx_b"}, ""},
		{"/e2b/v2/sandboxes?limit=2&order=asc", []string{"sbx_a", "sbx_b"}, tok("sbx_b", 2)},
		{"/e2b/v2/sandboxes?limit=2&order=asc&nextToken=" + tok("sbx_b", 2), []string{"sbx_c", "sbx_e"}, ""},
		// The token's sandbox need not exist any more: the page goes on from its place.
		{"/e2b/v2/sandboxes?nextToken=" + tok("sbx_gone", 4), []string{"sbx_c", "sbx_b", "sbx_a"}, ""},
		{"/e2b/v2/sandboxes?startedAfter=" + t0.Add(2*time.Minute).Format(time.RFC3339Nano), []string{"sbx_e", "sbx_c", "sbx_b"}, ""},
		{"/e2b/v2/sandboxes?startedAfter=" + t0.Add(2*time.Minute+time.Nanosecond).Format(time.RFC3339Nano), []string{"sbx_e", "sbx_c", "sbx_b"}, ""},
		{"/e2b/v2/sandboxes?startedAfter=" + t0.Add(2*time.Minute+time.Millisecond).Format(time.RFC3339Nano), []string{"sbx_e", "sbx_c"}, ""},
		{"/e2b/v2/sandboxes?template=other", []string{}, ""},
		{"/e2b/sandboxes", []string{"sbx_e", "sbx_a"}, ""},
		{"/e2b/sandboxes?" + team, []string{"sbx_a"}, ""},
	} {
		w := serve(f, "GET", tc.target, "good")
		if got := ids(t, w); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.target, got, tc.want)
		}
		if got := w.Header().Get("X-Next-Token"); got != tc.next {
			t.Errorf("%s: next token %q, want %q", tc.target, got, tc.next)
		}
	}
}

// Errors come in E2B's shape, {code: <status>, message}, with the status the
// SDK maps to its classes.
func TestErrors(t *testing.T) {
	f := testFacade()
	for _, tc := range []struct {
		method, target, key string
		status              int
	}{
		{"GET", "/e2b/v2/sandboxes", "", http.StatusUnauthorized},
		{"GET", "/e2b/v2/sandboxes", "bad", http.StatusUnauthorized},
		{"GET", "/e2b/v2/sandboxes?limit=0", "good", http.StatusBadRequest},
		{"GET", "/e2b/v2/sandboxes?state=gone", "good", http.StatusBadRequest},
		{"GET", "/e2b/v2/sandboxes?nextToken=sbx_zz", "good", http.StatusBadRequest},
		{"GET", "/e2b/v2/sandboxes?order=newest", "good", http.StatusBadRequest},
		{"GET", "/e2b/v2/sandboxes?startedAfter=yesterday", "good", http.StatusBadRequest},
		{"GET", "/e2b/sandboxes/sbx_nope", "good", http.StatusNotFound},
		{"GET", "/e2b/sandboxes/sbx_d", "good", http.StatusNotFound}, // destroyed
		{"GET", "/e2b/sandboxes/sbx_f", "good", http.StatusNotFound}, // failed
		{"DELETE", "/e2b/sandboxes/sbx_d", "good", http.StatusNotFound},
		{"POST", "/e2b/sandboxes/sbx_a/timeout", "good", http.StatusBadRequest}, // no body
		// What zeish does not serve is 501, never a 404 the SDK reads as "no such sandbox".
		{"GET", "/e2b/no/such/route", "good", http.StatusNotImplemented},
		{"PUT", "/e2b/sandboxes/sbx_a/network", "good", http.StatusNotImplemented},
		{"POST", "/e2b/v3/templates", "good", http.StatusNotImplemented},
		{"GET", "/e2b/volumes", "good", http.StatusNotImplemented},
		{"GET", "/e2b/secrets", "good", http.StatusNotImplemented},
	} {
		w := serve(f, tc.method, tc.target, tc.key)
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != tc.status || body.Code != tc.status || body.Message == "" {
			t.Errorf("%s %s: %d %s, want %d in E2B's shape", tc.method, tc.target, w.Code, w.Body, tc.status)
		}
	}
}

func TestDetail(t *testing.T) {
	at := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, tc := range []struct {
		sb     sandbox.Sandbox
		state  string
		end    time.Time
		action string
	}{
		{sandbox.Sandbox{State: sandbox.StateRunning}, "running", never, "kill"},
		{sandbox.Sandbox{State: sandbox.StateStopped, TimeoutAt: &at, OnTimeout: "pause"}, "paused", at, "pause"},
		{sandbox.Sandbox{State: sandbox.StatePaused, TimeoutAt: &at, OnTimeout: "delete"}, "paused", at, "kill"},
	} {
		d := (&Facade{}).detail(tc.sb)
		if d["state"] != tc.state || d["endAt"] != tc.end || d["lifecycle"].(map[string]any)["onTimeout"] != tc.action {
			t.Errorf("%+v: %v", tc.sb, d)
		}
	}
}

func TestHostRoute(t *testing.T) {
	f := New(Options{App: &fakeApp{}, Domain: "Example.Test"})
	for host, want := range map[string]string{
		"api.example.test":                "api ",
		"API.example.test:443":            "api ",
		"49983-sbx_abc.example.test":      "sbx_abc 49983",
		"49983-sbx_abc.example.test:8080": "sbx_abc 49983",
		"3000-sbx_abc.example.test":       "sbx_abc 3000",
		"3000-sbx-abc.example.test":       "sbx_abc 3000",
		"0-sbx_abc.example.test":          " ",
		"65536-sbx_abc.example.test":      " ",
		"03000-sbx_abc.example.test":      " ",
		"x-sbx_abc.example.test":          " ",
		"49983-.example.test":             " ",
		"49983-a.b.example.test":          " ",
		"example.test":                    " ",
		"api.example.test.evil":           " ",
		"127.0.0.1:7420":                  " ",
	} {
		if id, port := f.hostRoute(host); id+" "+port != want {
			t.Errorf("%s: %q %q, want %q", host, id, port, want)
		}
	}
	if got, _ := New(Options{App: &fakeApp{}}).hostRoute("api.example.test"); got != "" {
		t.Errorf("no domain: %q", got)
	}
}

// Mount sends E2B's host names to the facade and everything else on.
func TestMount(t *testing.T) {
	f := testFacade()
	f.domain = "example.test"
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := f.Mount(next)
	for _, tc := range []struct {
		host, path string
		status     int
	}{
		{"api.example.test", "/v2/sandboxes", http.StatusOK},
		{"127.0.0.1", "/e2b/v2/sandboxes", http.StatusOK},
		{"127.0.0.1", "/api/v1/public/sandboxes", http.StatusTeapot},
		{"127.0.0.1", "/e2bx", http.StatusTeapot},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		req.Host = tc.host
		req.Header.Set("X-API-KEY", "good")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.status {
			t.Errorf("%s%s: %d, want %d", tc.host, tc.path, w.Code, tc.status)
		}
	}
}

// A sandbox's host name for another port than envd's reaches zeish's port
// proxy, E2B's traffic token as the bearer token.
func TestMountPorts(t *testing.T) {
	f := testFacade()
	f.domain = "example.test"
	var got *http.Request
	h := f.Mount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r }))
	req := httptest.NewRequest("POST", "/a/b?c=d", nil)
	req.Host = "3000-sbx_abc.example.test"
	req.Header.Set("E2b-Traffic-Access-Token", "tok")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got == nil || got.URL.Path != "/data/v1/sandboxes/sbx_abc/ports/3000/a/b" || got.URL.RawQuery != "c=d" ||
		got.Header.Get("Authorization") != "Bearer tok" || got.Header.Get("E2b-Traffic-Access-Token") != "" || got.Method != "POST" {
		t.Fatalf("port request: %+v", got)
	}
	req = httptest.NewRequest("GET", "/", nil)
	req.Host = "8080-sbx-abc.example.test"
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.URL.Path != "/data/v1/sandboxes/sbx_abc/ports/8080/" || got.Header.Get("Authorization") != "" {
		t.Fatalf("port request without a token: %+v", got)
	}
}

// envd is found by host name or by E2B's headers; a sandbox that is gone
// answers 502, which the SDK reads as "not running".
func TestEnvdRouting(t *testing.T) {
	b := &fakeApp{}
	f := New(Options{App: b, Domain: "example.test"})
	h := f.Mount(http.NotFoundHandler())
	for _, tc := range []struct {
		host, path string
		header     map[string]string
		status     int
		asked      string
	}{
		{"49983-sbx_one.example.test", "/health", map[string]string{"X-Access-Token": "t1"}, http.StatusBadGateway, "sbx_one t1"},
		{"127.0.0.1", "/e2b/envd/health", map[string]string{"E2b-Sandbox-Id": "sbx_two", "X-Access-Token": "t2"}, http.StatusBadGateway, "sbx_two t2"},
		{"127.0.0.1", "/e2b/envd/files", nil, http.StatusBadRequest, ""},
		{"127.0.0.1", "/e2b/envd/health", map[string]string{"E2b-Sandbox-Id": "sbx_two", "E2b-Sandbox-Port": "3000"}, http.StatusBadGateway, ""},
	} {
		b.asked = nil
		req := httptest.NewRequest("GET", tc.path, nil)
		req.Host = tc.host
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		asked := strings.Join(b.asked, ",")
		if w.Code != tc.status || asked != tc.asked {
			t.Errorf("%s%s: %d (asked %q) %s, want %d (asked %q)", tc.host, tc.path, w.Code, asked, w.Body, tc.status, tc.asked)
		}
	}
}

func TestTemplateAlias(t *testing.T) {
	f := New(Options{App: &fakeApp{}})
	for _, tc := range []struct {
		target, key string
		status      int
	}{
		{"/e2b/templates/aliases/base", "good", http.StatusOK},
		{"/e2b/templates/aliases/nope", "good", http.StatusNotFound},
		{"/e2b/templates/aliases/base", "bad", http.StatusUnauthorized},
		{"/e2b/templates/aliases/base", "", http.StatusUnauthorized},
	} {
		if w := serve(f, "GET", tc.target, tc.key); w.Code != tc.status {
			t.Errorf("%s with %q: %d %s, want %d", tc.target, tc.key, w.Code, w.Body, tc.status)
		}
	}
}

// E2B's snapshot calls are zeish's snapshots: taken, listed (all, one
// sandbox's, by name) and deleted by id; a template id is not E2B's to delete.
func TestSnapshots(t *testing.T) {
	f := testFacade()
	one := `[{"names":["one"],"snapshotID":"snp_1"}]`
	for _, tc := range []struct {
		method, target, key string
		status              int
		body                string
	}{
		{"POST", "/e2b/sandboxes/sbx_a/snapshots", "good", http.StatusCreated, `{"names":["snapshot-1"],"snapshotID":"snp_new"}`},
		{"POST", "/e2b/sandboxes/sbx_zz/snapshots", "good", http.StatusNotFound, ""},
		{"POST", "/e2b/sandboxes/sbx_a/snapshots", "bad", http.StatusUnauthorized, ""},
		{"GET", "/e2b/snapshots", "good", http.StatusOK, one},
		{"GET", "/e2b/snapshots?sandboxID=sbx_a", "good", http.StatusOK, one},
		{"GET", "/e2b/snapshots?sandboxID=sbx_b", "good", http.StatusOK, "[]"},
		{"GET", "/e2b/snapshots?name=other", "good", http.StatusOK, "[]"},
		{"GET", "/e2b/snapshots?sandboxID=sbx_zz", "good", http.StatusNotFound, ""},
		{"GET", "/e2b/snapshots", "bad", http.StatusUnauthorized, ""},
		{"DELETE", "/e2b/templates/snp_1", "good", http.StatusNoContent, ""},
		{"DELETE", "/e2b/templates/snp_2", "good", http.StatusNotFound, ""},
		{"DELETE", "/e2b/templates/base", "good", http.StatusNotFound, ""},
		{"DELETE", "/e2b/templates/snp_1", "bad", http.StatusUnauthorized, ""},
	} {
		w := serve(f, tc.method, tc.target, tc.key)
		if w.Code != tc.status {
			t.Errorf("%s %s (%s): %d %s, want %d", tc.method, tc.target, tc.key, w.Code, w.Body, tc.status)
		}
		if tc.body != "" && strings.TrimSpace(w.Body.String()) != tc.body {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.target, w.Body, tc.body)
		}
	}
}

// envd's routes and a sandbox's host names are data-plane streams: the
// server's deadlines spare them (a 50 MiB upload takes longer than a
// control-plane body may).
func TestIsStream(t *testing.T) {
	f := New(Options{Domain: "example.test"})
	for _, tc := range []struct {
		host, path string
		want       bool
	}{
		{"127.0.0.1", "/e2b/envd/files", true},
		{"49983-sbx_abc.example.test", "/files", true},
		{"3000-sbx_abc.example.test", "/upload", true},
		{"api.example.test", "/sandboxes", false},
		{"127.0.0.1", "/e2b/sandboxes", false},
		{"127.0.0.1", "/e2b/envdx", false},
	} {
		r := httptest.NewRequest("POST", tc.path, nil)
		r.Host = tc.host
		if got := f.IsStream(r); got != tc.want {
			t.Errorf("%s%s: %v, want %v", tc.host, tc.path, got, tc.want)
		}
	}
}
