package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/sandbox"
)

// TestBadInput checks that bad requests get a clear error with a stable code
// and change nothing.
func TestBadInput(t *testing.T) {
	s := startServer(t)
	const sbx = api.BasePath + "/public/sandboxes"
	checkBadRequests(t, s)

	// Wrong state: a sandbox that is still starting gives no data-plane access.
	var sb sandbox.Sandbox
	if st := s.do(t, "POST", sbx, s.key, `{"memory_mib":256}`, &sb); st != http.StatusAccepted || sb.State != sandbox.StateStarting {
		t.Fatalf("create: %d %+v", st, sb)
	}
	var e api.ErrorBody
	if st := s.do(t, "POST", sbx+"/"+sb.ID+"/access", s.key, `{}`, &e); st != 409 || e.Error.Code != "invalid_state" {
		t.Fatalf("access while starting: %d %+v, want 409 invalid_state", st, e)
	}
	// A duplicate live name is refused.
	var sb2 sandbox.Sandbox
	s.do(t, "POST", sbx, s.key, `{"name":"dup","memory_mib":256}`, &sb2)
	if st := s.do(t, "POST", sbx, s.key, `{"name":"dup","memory_mib":256}`, &e); st != 409 || e.Error.Code != "name_taken" {
		t.Fatalf("duplicate name: %d %+v, want 409 name_taken", st, e)
	}
	// Deleting while starting cancels the boot and leaves nothing.
	for _, id := range []string{sb.ID, sb2.ID} {
		var got sandbox.Sandbox
		if st := s.do(t, "DELETE", sbx+"/"+id+"?wait=true", s.key, nil, &got); st != 200 || got.State != sandbox.StateDestroyed {
			t.Fatalf("delete while starting: %d %+v", st, got)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if p := procscan.Under(s.dataDir); len(p) != 0 {
		t.Fatalf("VM processes left after deleting starting sandboxes: %v", p)
	}
}

// checkBadRequests sends requests that must be refused with their status
// and code, and checks they created nothing: the same table for a single
// zeishd (TestBadInput) and a cluster's control plane (TestCluster).
func checkBadRequests(t *testing.T, s *server) {
	t.Helper()
	const sbx = api.BasePath + "/public/sandboxes"
	cases := []struct {
		name, method, path, body string
		noAuth                   bool
		status                   int
		code                     string
	}{
		{"unknown field", "POST", sbx, `{"template":"base","colour":"red"}`, false, 400, "invalid_argument"},
		{"not json", "POST", sbx, `{"template":`, false, 400, "invalid_argument"},
		{"trailing data", "POST", sbx, `{} {}`, false, 400, "invalid_argument"},
		{"negative memory", "POST", sbx, `{"memory_mib":-1}`, false, 400, "invalid_argument"},
		{"absurd memory", "POST", sbx, `{"memory_mib":99999999}`, false, 400, "invalid_argument"},
		{"negative vcpus", "POST", sbx, `{"vcpus":-2}`, false, 400, "invalid_argument"},
		{"absurd disk", "POST", sbx, `{"disk_mib":100000000}`, false, 400, "invalid_argument"},
		{"unknown size", "POST", sbx, `{"size":"huge"}`, false, 400, "invalid_argument"},
		{"unknown template", "POST", sbx, `{"template":"nope"}`, false, 400, "unknown_template"},
		{"bad name", "POST", sbx, `{"name":"Not A Hostname"}`, false, 400, "invalid_argument"},
		{"bad env name", "POST", sbx, `{"env":{"1X":"y"}}`, false, 400, "invalid_argument"},
		{"unknown region", "POST", sbx, `{"region":"mars"}`, false, 400, "invalid_argument"},
		{"bad wait", "POST", sbx + "?wait=maybe", `{}`, false, 400, "invalid_argument"},
		{"no key", "POST", sbx, `{}`, true, 401, "unauthenticated"},
		{"neither an id nor a name", "GET", sbx + "/Not_An_Id", "", false, 400, "invalid_argument"},
		{"unknown name", "GET", sbx + "/no-such-name", "", false, 404, "not_found"},
		{"unknown id", "GET", sbx + "/sbx_00000000000000000000", "", false, 404, "not_found"},
		{"delete unknown id", "DELETE", sbx + "/sbx_00000000000000000000", "", false, 404, "not_found"},
		{"bad list state", "GET", sbx + "?state=sleepy", "", false, 400, "invalid_argument"},
		{"unknown route", "GET", api.BasePath + "/public/nothing", "", false, 404, "not_found"},
		{"data plane without token", "POST", api.DataPath + "/sandboxes/sbx_00000000000000000000/exec", `{"argv":["true"]}`, true, 401, "unauthenticated"},
		{"data plane forged token", "POST", api.DataPath + "/sandboxes/sbx_00000000000000000000/exec", `{"argv":["true"]}`, false, 401, "unauthenticated"},
		{"unknown accel", "POST", sbx, `{"accel":"gpu"}`, false, 400, "invalid_accel"},
		{"node labels no node has", "POST", sbx, `{"node_labels":{"gpu":"h100"}}`, false, 409, "node_full"},
		{"bad node label", "POST", sbx, `{"node_labels":{"a b":"c"}}`, false, 400, "invalid_argument"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok := s.key
			if c.noAuth {
				tok = ""
			}
			var body api.ErrorBody
			status := s.do(t, c.method, c.path, tok, c.body, &body)
			if status != c.status || body.Error.Code != c.code || body.Error.Message == "" {
				t.Fatalf("got %d %+v, want %d %s with a message", status, body.Error, c.status, c.code)
			}
		})
	}
	var list api.SandboxList
	if s.do(t, "GET", sbx+"?include_destroyed=true", s.key, nil, &list); len(list.Sandboxes) != 0 {
		t.Fatalf("bad requests created sandboxes: %+v", list.Sandboxes)
	}
}

// TestBootFailureRollsBack makes every boot fail (the agent gets no time to
// answer) and checks that a failed create leaves a sandbox in state error
// with a reason, and no process, file or RAM file behind.
func TestBootFailureRollsBack(t *testing.T) {
	s := startServer(t, "ZEISH_BOOT_TIMEOUT=1ms")
	var sb sandbox.Sandbox
	if st := s.do(t, "POST", api.BasePath+"/public/sandboxes?wait=true", s.key, `{"memory_mib":256}`, &sb); st != 200 {
		t.Fatalf("create: %d", st)
	}
	if sb.State != sandbox.StateError || sb.StateReason == "" {
		t.Fatalf("state %s (%q), want error with a reason", sb.State, sb.StateReason)
	}
	if p := procscan.Under(s.dataDir); len(p) != 0 {
		t.Fatalf("VM processes left: %v", p)
	}
	if s.remember(); len(s.shmFiles()) != 0 {
		t.Fatalf("RAM files left: %v", s.shmFiles())
	}
}
