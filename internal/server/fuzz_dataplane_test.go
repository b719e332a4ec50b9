package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/zeish/zeish/sandbox"
)

// Fuzz targets for what the data plane decodes from people it does not
// trust: a guest's DevTools answers, Host headers, data-plane tokens.

// FuzzRewriteDevToolsJSON: whatever a guest answers on the browser's port,
// the rewrite never fails, says the length it sends, passes what is not
// JSON through untouched, and in what is JSON leaves no frontend URL and
// no WebSocket URL that leads anywhere but under the sandbox's own
// …/browser/devtools/ on this server.
func FuzzRewriteDevToolsJSON(f *testing.F) {
	for _, seed := range []string{
		`{"Browser":"Chrome/1","webSocketDebuggerUrl":"ws://10.0.0.2:9222/devtools/browser/B"}`,
		`[{"id":"P","devtoolsFrontendUrl":"/x","webSocketDebuggerUrl":"ws://10.0.0.2:9222/devtools/page/P"},{"id":"Q"}]`,
		`{"webSocketDebuggerUrl":"ws://10.0.0.2:9222/devtools/../../../../console/"}`,
		`{"webSocketDebuggerUrl":"ws://10.0.0.2:9222/devtools/a%3Ftoken=x%23"}`,
		`{"webSocketDebuggerUrl":"ws://evil.example/devtools/page/P"}`,
		`{"webSocketDebuggerUrl":7,"devtoolsFrontendUrlCompat":"x"}`,
		`[[{"webSocketDebuggerUrl":"ws://10.0.0.2/devtools/p"}]]`, `oops`, ``, `null`, `{"a":1}{"b":2}`,
	} {
		f.Add([]byte(seed))
	}
	const base = "ws://127.0.0.1:7420/data/v1/sandboxes/sbx_x/browser"
	f.Fuzz(func(t *testing.T, body []byte) {
		resp := &http.Response{Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}
		if err := rewriteDevToolsJSON(resp, base, "T"); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		out, _ := io.ReadAll(resp.Body)
		if resp.ContentLength != int64(len(out)) || resp.Header.Get("Content-Length") != strconv.Itoa(len(out)) {
			t.Fatalf("Content-Length %d (%s) for %d bytes", resp.ContentLength, resp.Header.Get("Content-Length"), len(out))
		}
		var doc any
		if json.Unmarshal(body, &doc) != nil {
			if !bytes.Equal(out, body) {
				t.Fatalf("not JSON %q came out as %q", body, out)
			}
			return
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatalf("JSON %q came out as %q: %v", body, out, err)
		}
		check := func(m map[string]any) {
			for _, k := range []string{"devtoolsFrontendUrl", "devtoolsFrontendUrlCompat"} {
				if _, ok := m[k]; ok {
					t.Fatalf("%q kept %s: %q", body, k, out)
				}
			}
			ws, ok := m["webSocketDebuggerUrl"].(string)
			if !ok {
				return
			}
			u, err := url.Parse(ws)
			if err != nil || u.Scheme != "ws" || u.Host != "127.0.0.1:7420" || u.Fragment != "" ||
				!strings.HasPrefix(path.Clean(u.Path), "/data/v1/sandboxes/sbx_x/browser/devtools/") || path.Clean(u.Path) != u.Path ||
				u.RawQuery != "token=T" {
				t.Fatalf("%q: WebSocket URL %q does not lead under the sandbox's browser", body, ws)
			}
		}
		switch d := doc.(type) {
		case map[string]any:
			check(d)
		case []any:
			for _, e := range d {
				if m, ok := e.(map[string]any); ok {
					check(m)
				}
			}
		}
	})
}

// FuzzHostPort: a Host header names a guest port only in the one form
// <port>-<id><suffix>, so what hostPort reads back writes the same name
// again (case and the listener's port aside), and ownOrigin agrees.
func FuzzHostPort(f *testing.F) {
	for _, seed := range []string{
		"8080-sbx-9h80ayv5qv2jaxex5ej0.sbx.example.test", "8080-SBX-9H80AYV5QV2JAXEX5EJ0.SBX.example.test:443",
		"8080-my-name.sbx.example.test", "a.8080-sbx-abc.sbx.example.test", "sbx.example.test", "-.sbx.example.test",
		"[::1]:80", "8080-sbx-abc.sbx.example.test.", "8080-sbx_abc.sbx.example.test", "8080-sbx-abc.localhost:7420", "",
	} {
		f.Add(seed)
	}
	const domain = "sbx.example.test"
	s := &Server{opts: Options{PublicDomain: domain}}
	f.Fuzz(func(t *testing.T, host string) {
		port, id, ok := hostPort(host, "."+domain)
		if !ok {
			if port != "" || id != "" {
				t.Fatalf("%q: not a port's name, yet %q %q", host, port, id)
			}
			return
		}
		if strings.Contains(port, ".") || strings.Contains(id, ".") {
			t.Fatalf("%q: port %q id %q hold a dot", host, port, id)
		}
		dnsID := id
		if rest, isID := strings.CutPrefix(id, sandbox.PrefixSandbox); isID {
			dnsID = "sbx-" + rest
		}
		// The id's "_" may come as is (no DNS name holds it, a Host header may).
		name := strings.ToLower(hostOnly(host))
		if p, rest, ok := strings.Cut(name, "-"); ok && strings.HasPrefix(rest, sandbox.PrefixSandbox) {
			name = p + "-sbx-" + strings.TrimPrefix(rest, sandbox.PrefixSandbox)
		}
		if again := port + "-" + dnsID + "." + domain; again != name {
			t.Fatalf("%q read as %q %q, which is named %q", host, port, id, again)
		}
		p, err := strconv.Atoi(port)
		r := &http.Request{Host: host}
		if own := s.ownOrigin(r, id, p); own != (err == nil && strconv.Itoa(p) == port) {
			t.Fatalf("%q: ownOrigin(%q, %d) = %v", host, id, p, own)
		}
	})
}
