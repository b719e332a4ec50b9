package e2e

import (
	"context"
	"net/http"
	"strings"
)

// consoleUploadOnCluster signs in to the console of the control plane and
// uploads a file to sandbox id: the control plane sends it on to the data
// plane of the sandbox's node, where it lands in the guest.
func (l *lab) consoleUploadOnCluster(ctx context.Context, id, node string) {
	t := l.t
	t.Helper()
	base := "http://" + l.control.Addr
	send := func(method, path, body string, cookie *http.Cookie) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Zeish-Console", "1")
		req.Header.Set("Origin", base)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := send("POST", "/console/api/session", `{"api_key":"`+l.key+`"}`, nil)
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "zeish_session" {
			session = c
		}
	}
	if resp.StatusCode != http.StatusOK || session == nil {
		t.Fatalf("console sign-in on the control plane: %d", resp.StatusCode)
	}
	if resp := send("PUT", "/console/api/sandboxes/"+id+"/files?path=/root/from-console", "uploaded", session); resp.StatusCode != http.StatusOK {
		t.Fatalf("console upload through the control plane: %d", resp.StatusCode)
	}
	if out := l.execOn(ctx, id, node, "cat /root/from-console"); out != "uploaded" {
		t.Fatalf("the console's upload in the guest: %q", out)
	}
}
