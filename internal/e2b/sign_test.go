package e2b

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The SDK's getSignature (e2b 2.51.0) for these inputs, computed with it.
func TestSignatureMatchesTheSDK(t *testing.T) {
	if got := signature("/home/user/a.txt", "read", "", "tok", 0); got != "v1_Zkbb3914oLJLvMBzCAHQhm2ydBLxbSx2eQUR/kLdvIY" {
		t.Errorf("signature = %s", got)
	}
	if got := signature("x", "write", "root", "tok", 1796481411); got != "v1_MEJffFt3f298oqdL8s7hJrb4nEz8XQj8HNddFqLAVpI" {
		t.Errorf("signature with expiry = %s", got)
	}
}

// Tokens expire on the grid, at most tokenTTL (an hour) away and less than
// a step earlier, and every token that may still be live is among those a
// signature is checked against.
func TestTokenExpiries(t *testing.T) {
	for _, now := range []time.Time{
		time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 1, 10, 59, 59, 999, time.UTC),
		time.Date(2026, 3, 1, 10, 17, 3, 0, time.UTC),
	} {
		exp := tokenExpiry(now)
		if exp.Sub(now) <= tokenTTL-tokenStep || exp.Sub(now) > tokenTTL || !exp.Equal(exp.Truncate(tokenStep)) {
			t.Errorf("issued at %s: expires %s", now, exp)
		}
		// Issued then, checked at any later instant before it expires.
		for later := now; later.Before(exp); later = later.Add(73 * time.Second) {
			found := false
			for _, e := range liveExpiries(later) {
				found = found || e.Equal(exp)
			}
			if !found {
				t.Fatalf("issued %s (expiry %s), checked %s: not among %v", now, exp, later, liveExpiries(later))
			}
		}
	}
}

// E2B's signed /files URLs: a valid signature lets the request in as its
// token (it then meets the sandbox like any other: gone here, 502); a
// missing, wrong or expired one is envd's 401 with envd's words.
func TestSignedURLs(t *testing.T) {
	b := &fakeApp{}
	f := New(Options{App: b, Domain: "example.test"})
	h := f.Mount(http.NotFoundHandler())
	tok := fmt.Sprintf("tok-%d", tokenExpiry(time.Now()).Unix())
	later := time.Now().Add(time.Hour).Unix()
	earlier := time.Now().Add(-time.Minute).Unix()
	sign := func(path, op, user string, exp int64) string {
		q := url.Values{"path": {path}, "signature": {signature(path, op, user, tok, exp)}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != 0 {
			q.Set("signature_expiration", fmt.Sprint(exp))
		}
		return "/files?" + q.Encode()
	}
	for _, tc := range []struct {
		name, method, host, target string
		status                     int
		msg, asked                 string
	}{
		{"read", "GET", "49983-sbx_signed.example.test", sign("a.txt", "read", "", 0), 502, "", "sbx_signed " + tok},
		{"write as root, expiring later", "POST", "49983-sbx_signed.example.test", sign("/r", "write", "root", later), 502, "", "sbx_signed " + tok},
		{"by header (E2B_SANDBOX_URL)", "GET", "127.0.0.1", "/e2b/envd" + sign("a.txt", "read", "", 0), 502, "", "sbx_signed " + tok},
		{"expired", "GET", "49983-sbx_signed.example.test", sign("a.txt", "read", "", earlier), 401, "signature is already expired", ""},
		{"signed for reading, used to write", "POST", "49983-sbx_signed.example.test", sign("a.txt", "read", "", 0), 401, "invalid signature", ""},
		{"another path", "GET", "49983-sbx_signed.example.test", strings.Replace(sign("a.txt", "read", "", 0), "a.txt", "b.txt", 1), 401, "invalid signature", ""},
		{"no signature", "GET", "49983-sbx_signed.example.test", "/files?path=a.txt", 401, "missing signature query parameter", ""},
		{"unknown sandbox", "GET", "49983-sbx_other.example.test", sign("a.txt", "read", "", 0), 502, "sandbox sbx_other not found", ""},
		{"E2B_SANDBOX_URL's form names no sandbox", "GET", "127.0.0.1", sign("a.txt", "read", "", 0), 400, "names its sandbox", ""},
	} {
		b.asked = nil
		req := httptest.NewRequest(tc.method, tc.target, nil)
		req.Host = tc.host
		if tc.host == "127.0.0.1" && strings.HasPrefix(tc.target, "/e2b/") {
			req.Header.Set("E2b-Sandbox-Id", "sbx_signed")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		asked := strings.Join(b.asked, ",")
		if w.Code != tc.status || asked != tc.asked || !strings.Contains(w.Body.String(), tc.msg) {
			t.Errorf("%s: %d %s (asked %q), want %d %q (asked %q)", tc.name, w.Code, w.Body, asked, tc.status, tc.msg, tc.asked)
		}
	}
}
