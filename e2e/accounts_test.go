package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	zeishserver "github.com/zeish/zeish/internal/server"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func errorCode(b []byte) string {
	var e api.ErrorBody
	json.Unmarshal(b, &e)
	return e.Error.Code
}

func (s *server) clientFor(t *testing.T, key string) *zeish.Client {
	return zeish.NewClient(s.url(), key, zeish.WithHTTPClient(&http.Client{Transport: newValidatingTransport(t)}))
}

// TestAccountsIsolationSecrets proves, on one real VM owned by account A:
// the admin API (and its refusals), that account B gets 404 on every
// object-scoped route of the server's route table for A's sandbox and
// snapshot and 403 on the admin API, that data-plane tokens work for their
// own sandbox only, expire and die with the sandbox, and that a secret
// reaches the guest's exec environment but never an API response, the
// zeishd log or the SQLite file.
func TestAccountsIsolationSecrets(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 15*time.Minute)
	admin := s.client
	const canary = "canary-secret-5b1e9d77"
	var bodies [][]byte // every API response body, searched for the secret at the end
	seen := func(b []byte) []byte { bodies = append(bodies, b); return b }

	// Accounts and keys.
	accA, err := admin.CreateAccount(ctx, "team-a")
	if err != nil || accA.Admin || sandbox.CheckID(sandbox.PrefixAccount, accA.ID) != nil {
		t.Fatalf("create account: %+v %v", accA, err)
	}
	accB, _ := admin.CreateAccount(ctx, "team-b")
	if _, err := admin.CreateAccount(ctx, "team-a"); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("duplicate account: %v", err)
	}
	keyA, err := admin.CreateAPIKey(ctx, accA.ID)
	if err != nil || !strings.HasPrefix(keyA.Key, "zk_") || !strings.HasPrefix(keyA.Key, keyA.Prefix) {
		t.Fatalf("create key: %+v %v", keyA, err)
	}
	keyB, _ := admin.CreateAPIKey(ctx, accB.ID)
	keyB2, _ := admin.CreateAPIKey(ctx, accB.ID)
	keys, err := admin.ListAPIKeys(ctx, accB.ID)
	if err != nil || len(keys) != 2 {
		t.Fatalf("list keys of B: %+v %v", keys, err)
	}
	if st, _, b := s.raw(t, "GET", api.BasePath+"/admin/keys", s.key, ""); st != 200 || bytes.Contains(b, []byte(keyA.Key)) {
		t.Fatalf("key list: %d, or it shows a key: %s", st, b)
	}
	if accts, _ := admin.ListAccounts(ctx); len(accts) != 3 {
		t.Fatalf("accounts: %+v", accts)
	}
	a, b := s.clientFor(t, keyA.Key), s.clientFor(t, keyB.Key)

	t.Run("admin bad input", func(t *testing.T) {
		const adm = api.BasePath + "/admin"
		for _, c := range []struct{ method, path, body, code string }{
			{"POST", adm + "/accounts", `{"name":"Bad Name"}`, "invalid_argument"},
			{"POST", adm + "/accounts", `{}`, "invalid_argument"},
			{"POST", adm + "/accounts", `{"name":"x","plan":"gold"}`, "invalid_argument"},
			{"POST", adm + "/accounts/nope/keys", ``, "invalid_argument"},
			{"POST", adm + "/accounts/acc_00000000000000000000/keys", ``, "not_found"},
			{"GET", adm + "/keys?account=nope", ``, "invalid_argument"},
			{"DELETE", adm + "/keys/nope", ``, "invalid_argument"},
			{"DELETE", adm + "/keys/key_00000000000000000000", ``, "not_found"},
		} {
			st, _, body := s.raw(t, c.method, c.path, s.key, c.body)
			if errorCode(body) != c.code || st < 400 {
				t.Errorf("%s %s %s: %d %s, want %s", c.method, c.path, c.body, st, body, c.code)
			}
		}
		if accts, _ := admin.ListAccounts(ctx); len(accts) != 3 {
			t.Errorf("bad input changed the accounts: %+v", accts)
		}
	})

	sb, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "quiet-box", MemoryMiB: 256,
		Env: map[string]string{"PLAIN": "visible"}, Secrets: map[string]string{"API_TOKEN": canary}}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning || sb.AccountID != accA.ID {
		t.Fatalf("create: %+v %v", sb, err)
	}
	t.Cleanup(func() { a.DeleteSandbox(ctxFor(t, 2*time.Minute), sb.ID, zeish.Wait()) })
	snap, err := a.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "one"})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}

	t.Run("secret reaches the guest", func(t *testing.T) {
		conn := connect(t, a, sb.ID)
		if out := shell(t, conn, `echo "$API_TOKEN $PLAIN"`); strings.TrimSpace(out) != canary+" visible" {
			t.Fatalf("exec env: %q", out)
		}
		// A fork keeps the parent's secrets (sealed again under its own id).
		st, _, body := s.raw(t, "POST", api.BasePath+"/public/sandboxes/"+sb.ID+"/clone?wait=true", keyA.Key, `{"name":"quiet-kid"}`)
		var clone api.CloneResponse
		if st != 200 || json.Unmarshal(seen(body), &clone) != nil || len(clone.Sandboxes) != 1 {
			t.Fatalf("clone: %d %s", st, body)
		}
		kid := clone.Sandboxes[0]
		t.Cleanup(func() { a.DeleteSandbox(ctxFor(t, 2*time.Minute), kid.ID, zeish.Wait()) })
		if out := shell(t, connect(t, a, kid.ID), `echo "$API_TOKEN"`); strings.TrimSpace(out) != canary {
			t.Fatalf("child's exec env: %q", out)
		}
		if _, err := a.DeleteSandbox(ctx, kid.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	})

	sbPath := api.BasePath + "/public/sandboxes/" + sb.ID
	t.Run("cross-account matrix", func(t *testing.T) {
		access := api.Access{}
		st, _, body := s.raw(t, "POST", sbPath+"/access", keyA.Key, `{}`)
		if st != 200 || json.Unmarshal(body, &access) != nil {
			t.Fatalf("access: %d %s", st, body)
		}
		other := sandbox.NewID(sandbox.PrefixSandbox)
		for _, route := range (&zeishserver.Server{}).Routes() {
			method, path, _ := strings.Cut(route, " ")
			body := `{}`
			if strings.HasSuffix(path, "/exec") {
				body = `{"argv":["true"]}`
			}
			if method == "GET" || method == "DELETE" {
				body = ""
			}
			query := ""
			if strings.Contains(path, "/files") {
				query = "?path=/root"
			}
			path = strings.ReplaceAll(path, "{pid}", "1")
			switch {
			case strings.HasPrefix(path, api.BasePath+"/admin/"):
				// Every admin route refuses B (with an id of B's own).
				p := strings.ReplaceAll(path, "{id}", keyB2.ID)
				p = strings.ReplaceAll(p, "/accounts/"+keyB2.ID, "/accounts/"+accB.ID)
				if st, _, rb := s.raw(t, method, p, keyB.Key, body); st != 403 || errorCode(rb) != "forbidden" {
					t.Errorf("B: %s %s = %d %s, want 403 forbidden", method, p, st, rb)
				}
			case strings.HasPrefix(path, api.DataPath):
				// A's token on another sandbox, and B's API key on A's sandbox.
				for _, c := range []struct{ id, token string }{{other, access.Token}, {sb.ID, keyB.Key}} {
					p := strings.ReplaceAll(path, "{id}", c.id) + query
					if st, _, rb := s.raw(t, method, p, c.token, body); st != 401 || errorCode(rb) != "unauthenticated" {
						t.Errorf("%s %s = %d %s, want 401 unauthenticated", method, p, st, rb)
					}
				}
			case strings.HasPrefix(path, "/console/") && strings.Contains(path, "{id}"):
				// The console's own routes take B's console session.
				p := strings.ReplaceAll(path, "{id}", sb.ID)
				if st, rb := consoleAs(t, s, keyB.Key, method, p, body); st != 404 || errorCode(rb) != "not_found" {
					t.Errorf("B's console: %s %s = %d %s, want 404 not_found", method, p, st, rb)
				}
			case strings.Contains(path, "{id}"):
				id := sb.ID
				if strings.Contains(path, "/snapshots/{id}") {
					id = snap.ID
				}
				p := strings.ReplaceAll(path, "{id}", id)
				if st, _, rb := s.raw(t, method, p, keyB.Key, body); st != 404 || errorCode(rb) != "not_found" {
					t.Errorf("B: %s %s = %d %s, want 404 not_found", method, p, st, rb)
				}
			default:
				t.Logf("%s: not object-scoped (listing is checked below)", route)
			}
		}
		if list, err := b.ListSandboxes(ctx, zeish.ListOptions{IncludeDestroyed: true}); err != nil || len(list) != 0 {
			t.Errorf("B lists %+v %v", list, err)
		}
		if u, err := b.Usage(ctx, time.Time{}, time.Time{}); err != nil || len(u.Sandboxes) != 0 {
			t.Errorf("B's usage shows %+v %v", u, err)
		}
		// Nothing B tried changed A's objects.
		if got, err := a.GetSandbox(ctx, sb.ID); err != nil || got.State != sandbox.StateRunning {
			t.Fatalf("A's sandbox after B's tries: %+v %v", got, err)
		}
		if _, err := a.GetSnapshot(ctx, snap.ID); err != nil {
			t.Fatalf("A's snapshot after B's tries: %v", err)
		}
	})

	t.Run("no secret in any response", func(t *testing.T) {
		for _, p := range []string{sbPath, api.BasePath + "/public/sandboxes?include_destroyed=true",
			api.BasePath + "/public/usage", sbPath + "/lineage", sbPath + "/snapshots"} {
			st, _, body := s.raw(t, "GET", p, keyA.Key, "")
			if st != 200 {
				t.Fatalf("GET %s: %d %s", p, st, body)
			}
			seen(body)
		}
		_, _, body := s.raw(t, "POST", sbPath+"/wait", keyA.Key, `{}`)
		seen(body)
		// Two reads 1 s apart: cost is fresh (it grows while the sandbox runs).
		var before, after sandbox.Sandbox
		_, _, b1 := s.raw(t, "GET", sbPath, keyA.Key, "")
		time.Sleep(1100 * time.Millisecond)
		_, _, b2 := s.raw(t, "GET", sbPath, keyA.Key, "")
		json.Unmarshal(seen(b1), &before)
		json.Unmarshal(seen(b2), &after)
		if before.CostMicros <= 0 || after.CostMicros <= before.CostMicros {
			t.Errorf("cost_micros not fresh: %d then %d", before.CostMicros, after.CostMicros)
		}
		if strings.Contains(string(b1), "secret") || strings.Contains(string(b1), "API_TOKEN") {
			t.Errorf("a sandbox shows its secrets: %s", b1)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		var short api.Access
		if st, _, body := s.raw(t, "POST", sbPath+"/access", keyA.Key, `{"ttl_seconds":1}`); st != 200 || json.Unmarshal(body, &short) != nil {
			t.Fatalf("access: %d %s", st, body)
		}
		for _, bad := range []string{`{"ttl_seconds":3601}`, `{"ttl_seconds":-1}`} {
			if st, _, body := s.raw(t, "POST", sbPath+"/access", keyA.Key, bad); st != 400 || errorCode(body) != "invalid_argument" {
				t.Errorf("access %s: %d %s", bad, st, body)
			}
		}
		time.Sleep(2 * time.Second)
		if st, _, body := s.raw(t, "GET", short.URL+"/processes", short.Token, ""); st != 401 || errorCode(body) != "token_expired" {
			t.Errorf("expired token: %d %s, want 401 token_expired", st, body)
		}
		// A key of B, revoked, stops working at once.
		if _, err := admin.RevokeAPIKey(ctx, keyB.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ListSandboxes(ctx, zeish.ListOptions{}); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("revoked key: %v", err)
		}
		if st, _, body := s.raw(t, "DELETE", api.BasePath+"/admin/keys/"+keyB.ID, s.key, ""); st != 200 || !strings.Contains(string(body), "revoked_at") {
			t.Errorf("revoke twice: %d %s", st, body)
		}
	})

	t.Run("token dies with the sandbox", func(t *testing.T) {
		acc, err := a.Access(ctx, sb.ID, 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if st, _, body := s.raw(t, "GET", acc.URL+"/processes", acc.Token, ""); st != 200 {
			t.Fatalf("live token: %d %s", st, body)
		}
		if _, err := a.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		if st, _, body := s.raw(t, "GET", acc.URL+"/processes", acc.Token, ""); st != 401 || errorCode(body) != "unauthenticated" {
			t.Errorf("token after delete: %d %s, want 401 unauthenticated", st, body)
		}
		if st, _, body := s.raw(t, "POST", sbPath+"/access", keyA.Key, `{}`); st != 409 || errorCode(body) != "invalid_state" {
			t.Errorf("access to a destroyed sandbox: %d %s, want 409", st, body)
		}
	})

	// The secret is in no response, no log line and not in the database file.
	for _, body := range bodies {
		if bytes.Contains(body, []byte(canary)) {
			t.Errorf("an API response holds the secret: %s", body)
		}
	}
	if strings.Contains(s.logText(), canary) {
		t.Errorf("the zeishd log holds the secret")
	}
	for _, f := range []string{"zeish.db", "zeish.db-wal", "zeish.db-shm"} {
		if b, err := os.ReadFile(filepath.Join(s.dataDir, f)); err == nil && bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s holds the secret in the clear", f)
		}
	}
	if fi, err := os.Stat(filepath.Join(s.dataDir, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets.key: %v %v, want mode 0600", fi, err)
	}
}

// consoleAs signs in to the console with key and makes one request there,
// as the console's own pages do (session cookie and X-Zeish-Console).
func consoleAs(t *testing.T, s *server, key, method, path, body string) (int, []byte) {
	t.Helper()
	signIn, _ := http.NewRequest("POST", "http://"+s.addr+"/console/api/session", strings.NewReader(`{"api_key":"`+key+`"}`))
	signIn.Header.Set("Content-Type", "application/json")
	signIn.Header.Set("X-Zeish-Console", "1")
	resp, err := http.DefaultClient.Do(signIn)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.Cookies()) == 0 {
		t.Fatalf("console sign-in: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(method, "http://"+s.addr+path, strings.NewReader(body))
	for _, c := range resp.Cookies() {
		req.AddCookie(c)
	}
	req.Header.Set("X-Zeish-Console", "1")
	out, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	b, _ := io.ReadAll(out.Body)
	return out.StatusCode, b
}
