package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Chromium's URLs name the guest; the data plane hands out its own.
func TestViaProxy(t *testing.T) {
	const base = "wss://zeish.example/data/v1/sandboxes/sbx_x/browser"
	cases := []struct {
		in, tok, want string
		bad           bool
	}{
		{"ws://10.213.0.2:9222/devtools/browser/abc", "", base + "/devtools/browser/abc", false},
		{"ws://10.213.0.2:9222/devtools/page/P1", "zdp_a.b", base + "/devtools/page/P1?token=zdp_a.b", false},
		{"ws://10.213.0.2:9222/devtools/browser/abc", "a+b/c", base + "/devtools/browser/abc?token=a%2Bb%2Fc", false},
		{"ws://10.213.0.2:9222/other", "", "", true},
		{"::not a url", "", "", true},
	}
	for _, c := range cases {
		got, err := viaProxy(c.in, base, c.tok)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("viaProxy(%q, %q) = %q, %v; want %q (error: %v)", c.in, c.tok, got, err, c.want, c.bad)
		}
	}
	if got := wsScheme("https://h/x"); got != "wss://h/x" {
		t.Errorf("wsScheme https: %q", got)
	}
	if got := wsScheme("http://h/x"); got != "ws://h/x" {
		t.Errorf("wsScheme http: %q", got)
	}
}

func TestRewriteDevToolsJSON(t *testing.T) {
	const base = "ws://127.0.0.1:7420/data/v1/sandboxes/sbx_x/browser"
	cases := []struct{ name, body, want string }{
		{"version", `{"Browser":"Chrome/1","webSocketDebuggerUrl":"ws://10.0.0.2:9222/devtools/browser/B"}`,
			`{"Browser":"Chrome/1","webSocketDebuggerUrl":"` + base + `/devtools/browser/B?token=T"}`},
		{"list", `[{"id":"P","devtoolsFrontendUrl":"/devtools/inspector.html?ws=10.0.0.2:9222/devtools/page/P","webSocketDebuggerUrl":"ws://10.0.0.2:9222/devtools/page/P"},{"id":"Q"}]`,
			`[{"id":"P","webSocketDebuggerUrl":"` + base + `/devtools/page/P?token=T"},{"id":"Q"}]`},
		{"odd URL dropped", `{"webSocketDebuggerUrl":"ws://10.0.0.2:9222/elsewhere"}`, `{}`},
		{"not JSON kept", `oops`, `oops`},
	}
	for _, c := range cases {
		resp := &http.Response{Header: http.Header{}, Body: io.NopCloser(strings.NewReader(c.body))}
		if err := rewriteDevToolsJSON(resp, base, "T"); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if !jsonEqual(string(b), c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
		if resp.ContentLength != int64(len(b)) {
			t.Errorf("%s: Content-Length %d for %d bytes", c.name, resp.ContentLength, len(b))
		}
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
