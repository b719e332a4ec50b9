package e2b

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zeish/zeish/sandbox"
)

// What a create's lifecycle asks becomes zeish's timeout action: kill is
// delete, pause is pause, a filesystem-only pause (autoPauseMemory false)
// is stop; E2B's API refuses the combinations it refuses, in its words.
func TestLifecycleOnTimeout(t *testing.T) {
	no, yes := false, true
	on := &struct {
		Enabled bool `json:"enabled"`
	}{Enabled: true}
	for _, tc := range []struct {
		name string
		req  lifecycleRequest
		want string
		err  string
	}{
		{"kill", lifecycleRequest{}, sandbox.OnTimeoutDelete, ""},
		{"pause", lifecycleRequest{AutoPause: true}, sandbox.OnTimeoutPause, ""},
		{"pause keeping memory", lifecycleRequest{AutoPause: true, AutoPauseMemory: &yes}, sandbox.OnTimeoutPause, ""},
		{"filesystem-only pause", lifecycleRequest{AutoPause: true, AutoPauseMemory: &no}, sandbox.OnTimeoutStop, ""},
		{"pause with auto-resume", lifecycleRequest{AutoPause: true, AutoResume: on}, sandbox.OnTimeoutPause, ""},
		{"memory without a pause", lifecycleRequest{AutoPauseMemory: &no}, "", "only applies when autoPause is true"},
		{"auto-resume of a filesystem-only pause", lifecycleRequest{AutoPause: true, AutoPauseMemory: &no, AutoResume: on}, "", "cannot be combined with autoResume"},
		{"auto-resume without a pause", lifecycleRequest{AutoResume: on}, "", "only be enabled when the sandbox pauses"},
	} {
		got, err := tc.req.onTimeout()
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %q, %v; want %q, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
	md := lifecycleRequest{AutoPause: true, AutoResume: on}.withAutoResume(map[string]string{"k": "v"}, 120)
	if md["k"] != "v" || autoResumes(sandbox.Sandbox{Metadata: md}) != 120 {
		t.Errorf("marked metadata: %v", md)
	}
	d := (&Facade{}).detail(sandbox.Sandbox{State: sandbox.StatePaused, OnTimeout: sandbox.OnTimeoutPause, Metadata: md})
	if d["metadata"].(map[string]string)[autoResumeKey] != "" || d["lifecycle"].(map[string]any)["autoResume"] != true {
		t.Errorf("E2B's view of it: %v", d)
	}
}

// E2B's auto-resume: a paused sandbox created with autoResume is resumed,
// with its create's timeout, by a request its owner could make (a good
// token, or a port open to everyone), for envd and for its ports alike; a
// filesystem-only paused (stopped) one, one without autoResume and a
// stranger's request leave it as it is.
func TestAutoResume(t *testing.T) {
	marked := map[string]string{autoResumeKey: "120"}
	b := &fakeApp{boxes: map[string]sandbox.Sandbox{
		"sbx_sleepy":  {ID: "sbx_sleepy", State: sandbox.StatePaused, Metadata: marked, PublicPorts: []int{8080}},
		"sbx_stopped": {ID: "sbx_stopped", State: sandbox.StateStopped, Metadata: marked},
		"sbx_plain":   {ID: "sbx_plain", State: sandbox.StatePaused},
		"sbx_awake":   {ID: "sbx_awake", State: sandbox.StateRunning, Metadata: marked},
	}}
	f := New(Options{App: b, Domain: "example.test", Logger: slog.New(slog.DiscardHandler)})
	h := f.Mount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, tc := range []struct {
		name, host, path, tokenHeader, token string
		resumed                              bool
	}{
		{"envd with its token", "49983-sbx_sleepy.example.test", "/health", "X-Access-Token", "good-token", true},
		{"a port with its traffic token", "3000-sbx_sleepy.example.test", "/", "E2b-Traffic-Access-Token", "good-token", true},
		{"a public port, no token", "8080-sbx_sleepy.example.test", "/", "", "", true},
		{"a private port, no token", "3000-sbx_sleepy.example.test", "/", "", "", false},
		{"envd with a bad token", "49983-sbx_sleepy.example.test", "/health", "X-Access-Token", "bad", false},
		{"filesystem-only pause", "49983-sbx_stopped.example.test", "/health", "X-Access-Token", "good-token", false},
		{"no autoResume", "49983-sbx_plain.example.test", "/health", "X-Access-Token", "good-token", false},
		{"running", "3000-sbx_awake.example.test", "/", "E2b-Traffic-Access-Token", "good-token", false},
	} {
		b.asked = nil
		req := httptest.NewRequest("GET", tc.path, nil)
		req.Host = tc.host
		if tc.tokenHeader != "" {
			req.Header.Set(tc.tokenHeader, tc.token)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		id := strings.SplitN(strings.SplitN(tc.host, ".", 2)[0], "-", 2)[1]
		resumed := strings.Contains(strings.Join(b.asked, ","), "resume "+id+" 120")
		if resumed != tc.resumed {
			t.Errorf("%s: resumed %v (asked %q), want %v", tc.name, resumed, b.asked, tc.resumed)
		}
	}
}
