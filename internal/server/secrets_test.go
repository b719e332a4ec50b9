package server

import (
	"context"
	"encoding/json"
	"github.com/zeish/zeish/internal/control"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// Account secrets: stored write-only, listed by name, per account; a
// template build naming one the account lacks is 400 unknown_secret.
func TestAccountSecrets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := testenv.SQLite(t)
	keys := map[string]string{}
	for _, name := range []string{"one", "two"} {
		acct := sandbox.NewID(sandbox.PrefixAccount)
		if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: name, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		key, hash := control.NewAPIKey()
		if err := st.CreateAPIKey(ctx, store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: acct, Hash: hash, Prefix: key[:8], CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		keys[name] = key
	}
	s, err := NewForTest(t, st, nil, dir), error(nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	call := func(key, method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+api.BasePath+"/public"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code := func(body string) string {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal([]byte(body), &e)
		return e.Error.Code
	}

	if st, body := call(keys["one"], "PUT", "/secrets/REG", `{"value":"bob:hunter2"}`); st != 200 || strings.Contains(body, "hunter2") {
		t.Fatalf("put: %d %s", st, body)
	}
	list := func(key string) []api.Secret {
		t.Helper()
		st, body := call(key, "GET", "/secrets", "")
		var l api.SecretList
		if err := json.Unmarshal([]byte(body), &l); st != 200 || err != nil || l.Secrets == nil || strings.Contains(body, "hunter2") {
			t.Fatalf("list: %d %s", st, body)
		}
		return l.Secrets
	}
	if l := list(keys["one"]); len(l) != 1 || l[0].Name != "REG" {
		t.Fatalf("list = %+v", l)
	}
	if l := list(keys["two"]); len(l) != 0 {
		t.Fatalf("another account's list = %+v", l)
	}
	for _, c := range []struct {
		name, key, method, path, body string
		status                        int
		code                          string
	}{
		{"bad name", keys["one"], "PUT", "/secrets/-x", `{"value":"v"}`, 400, "invalid_argument"},
		{"empty value", keys["one"], "PUT", "/secrets/X", `{"value":""}`, 400, "invalid_argument"},
		{"unknown field", keys["one"], "PUT", "/secrets/X", `{"value":"v","other":1}`, 400, "invalid_argument"},
		{"unknown secret", keys["one"], "POST", "/templates", `{"name":"t","from":"registry:127.0.0.1:1/a:b","registry_secret":"NOPE"}`, 400, "unknown_secret"},
		{"another account's secret", keys["two"], "POST", "/templates", `{"name":"t","from":"registry:127.0.0.1:1/a:b","registry_secret":"REG"}`, 400, "unknown_secret"},
		{"secret and password", keys["one"], "POST", "/templates", `{"name":"t","from":"registry:127.0.0.1:1/a:b","registry_secret":"REG","username":"u","password":"p"}`, 400, "invalid_argument"},
		{"secret without a registry", keys["one"], "POST", "/templates", `{"name":"t","from":"docker-archive:/x.tar","registry_secret":"REG"}`, 400, "invalid_argument"},
		{"delete another account's", keys["two"], "DELETE", "/secrets/REG", "", 404, "not_found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, body := call(c.key, c.method, c.path, c.body)
			if st != c.status || code(body) != c.code || strings.Contains(body, "hunter2") {
				t.Fatalf("%d %s, want %d %s", st, body, c.status, c.code)
			}
		})
	}
	if st, _ := call(keys["one"], "DELETE", "/secrets/REG", ""); st != 204 {
		t.Fatalf("delete: %d", st)
	}
	if l := list(keys["one"]); len(l) != 0 {
		t.Fatalf("list after delete = %+v", l)
	}
}
