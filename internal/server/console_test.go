package server

import (
	"context"
	"encoding/json"
	"github.com/zeish/zeish/internal/control"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store/sqlite"
)

// TestConsoleSession covers the console's sign-in, its cookie and every
// refusal, on a server without a node (the routes used need only the store).
func TestConsoleSession(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keyPath, err := control.EnsureAdmin(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := os.ReadFile(keyPath)
	key := strings.TrimSpace(string(kb))
	s, err := NewForTest(t, st, nil, dir), error(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	do := func(method, path, cookie, body string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if cookie != "" {
			req.Header.Set("Cookie", sessionCookie+"="+cookie)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp, b.String()
	}
	csrf := map[string]string{consoleHeader: "1"}

	if resp, body := do("POST", "/console/api/session", "", `{"api_key":"zk_wrong"}`, csrf); resp.StatusCode != 401 {
		t.Fatalf("wrong key: %d %s", resp.StatusCode, body)
	}
	if resp, body := do("POST", "/console/api/session", "", `{"api_key":"`+key+`"}`, map[string]string{consoleHeader: "1", "Origin": "http://evil.example"}); resp.StatusCode != 403 {
		t.Fatalf("sign-in from another origin: %d %s", resp.StatusCode, body)
	}
	resp, body := do("POST", "/console/api/session", "", `{"api_key":"`+key+`"}`, map[string]string{consoleHeader: "1", "Origin": "http://" + host})
	if resp.StatusCode != 200 {
		t.Fatalf("sign in: %d %s", resp.StatusCode, body)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/console" {
		t.Fatalf("session cookie %+v", cookie)
	}
	var view consoleSessionView
	if json.Unmarshal([]byte(body), &view); !view.Account.Admin || view.Plan.RunningSlots == 0 {
		t.Fatalf("session view %s", body)
	}
	sid := cookie.Value

	tests := []struct {
		name, method, path, cookie string
		hdr                        map[string]string
		want                       int
		code                       string
	}{
		{"session", "GET", "/console/api/session", sid, nil, 200, ""},
		{"proxied API", "GET", "/console/api/v1/admin/accounts", sid, nil, 200, ""},
		{"no cookie", "GET", "/console/api/v1/admin/accounts", "", nil, 401, "unauthenticated"},
		{"forged cookie", "GET", "/console/api/v1/admin/accounts", "forged", nil, 401, "unauthenticated"},
		{"change without the console header", "POST", "/console/api/v1/admin/accounts", sid, nil, 403, "forbidden"},
		{"another origin", "POST", "/console/api/v1/admin/accounts", sid, map[string]string{consoleHeader: "1", "Origin": "http://evil.example"}, 403, "forbidden"},
		{"cross-site fetch", "GET", "/console/api/v1/admin/accounts", sid, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "forbidden"},
		{"oversized upload", "PUT", "/console/api/sandboxes/sbx_0123456789abcdefghjk/files?path=/root/x", sid,
			nil, 400, "invalid_argument"},
		{"upload to a sandbox that is not the account's", "PUT", "/console/api/sandboxes/sbx_0123456789abcdefghjk/files?path=/root/x", sid,
			map[string]string{consoleHeader: "1"}, 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == "POST" {
				body = `{"name":"x"}`
			}
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(body))
			if tt.cookie != "" {
				req.AddCookie(&http.Cookie{Name: sessionCookie, Value: tt.cookie})
			}
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			if tt.name == "oversized upload" {
				big := strings.Repeat("x", 33<<20)
				req, _ = http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(big))
				req.AddCookie(&http.Cookie{Name: sessionCookie, Value: tt.cookie})
				req.Header.Set(consoleHeader, "1")
			}
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct{ Code, Message string }
			}
			json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tt.want || (tt.code != "" && e.Error.Code != tt.code) {
				t.Fatalf("%d %+v, want %d %s", resp.StatusCode, e, tt.want, tt.code)
			}
		})
	}

	// The console's page itself, with its policy.
	if resp, _ := do("GET", "/console/", "", "", nil); resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("console page: %d %v", resp.StatusCode, resp.Header)
	}

	// Sign out ends the session.
	if resp, body := do("DELETE", "/console/api/session", sid, "", csrf); resp.StatusCode != 204 {
		t.Fatalf("sign out: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do("GET", "/console/api/session", sid, "", nil); resp.StatusCode != 401 {
		t.Fatalf("session after sign-out: %d", resp.StatusCode)
	}

	// Revoking the key ends its sessions.
	resp, body = do("POST", "/console/api/session", "", `{"api_key":"`+key+`"}`, csrf)
	if resp.StatusCode != 200 {
		t.Fatal(body)
	}
	sid2 := resp.Cookies()[0].Value
	acct, err := st.AccountByKeyHash(ctx, control.HashKey(key))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := st.ListAPIKeys(ctx, acct.ID)
	if err != nil || len(keys) == 0 {
		t.Fatal(keys, err)
	}
	if _, err := st.RevokeAPIKey(ctx, keys[0].ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if resp, _ := do("GET", "/console/api/session", sid2, "", nil); resp.StatusCode != 401 {
		t.Fatalf("session after the key was revoked: %d", resp.StatusCode)
	}
}
