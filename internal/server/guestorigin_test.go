package server

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/zeish/zeish/internal/control"
)

// A guest's page never runs on zeishd's origin with zeishd's cookies: by
// the path form a browser gets it sandboxed (an opaque origin) and without
// the guest's cookies or other origin-wide headers, a WebSocket's 101
// included; by the port's own host name (under localhost, the public
// domain or E2B's) it keeps them, except a cookie for a wider domain or in
// the console's name. Either way the console's session cookie never
// reaches the guest.
func TestGuestContentOffZeishdOrigin(t *testing.T) {
	const port = 8080
	rig, ids := newPortRig(t, Options{PublicDomain: "sbx.example.test", GuestDomains: []string{"e2b.example.test"}}, nil, []int{1}, port)
	id := ids[0][0]
	var mu sync.Mutex
	var seen []*http.Request // what the guest was asked
	rig.guest(port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		h := w.Header()
		h.Add("Set-Cookie", "app=1; Path=/")
		h.Add("Set-Cookie", "toss=1; Domain=example.test; Path=/")
		h.Add("Set-Cookie", sessionCookie+"=guest; Path=/console")
		h.Set("Clear-Site-Data", `"cookies", "storage"`)
		h.Set("Service-Worker-Allowed", "/")
		h.Set("Content-Security-Policy", "sandbox allow-scripts allow-same-origin")
		if r.URL.Path == "/ws" {
			rc := http.NewResponseController(w)
			c, brw, err := rc.Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSet-Cookie: ws=1; Path=/\r\n\r\n")
			brw.Flush()
			return
		}
		h.Set("Content-Type", "text/html")
		w.Write([]byte("<script>fetch('/console/api/v1/admin/accounts')</script>"))
	}))
	dns := strings.Replace(id, "_", "-", 1)
	p := strconv.Itoa(port)
	cases := []struct {
		name, host, path, guestPath string
		own                         bool
	}{
		{"path form on zeishd's origin", "", portPath(id, port, "/page"), "/page", false},
		{"path form on zeishd's public domain", "zeish.sbx.example.test", portPath(id, port, "/page"), "/page", false},
		{"host form under localhost", p + "-" + dns + ".localhost:7420", "/page", "/page", true},
		{"host form under the public domain", p + "-" + dns + ".sbx.example.test", "/page", "/page", true},
		{"a replica's hand-off of the host form", p + "-" + dns + ".sbx.example.test", portPath(id, port, "/page"), "/page", true},
		{"E2B's host form, in the path form", p + "-" + dns + ".e2b.example.test", portPath(id, port, "/page"), "/page", true},
		{"path form by another port's name", "9090-" + dns + ".localhost", portPath(id, port, "/page"), "/page", false},
		{"path form by another domain", p + "-" + dns + ".evil.test", portPath(id, port, "/page"), "/page", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			req := rig.request("GET", c.host, c.path)
			req.Header.Set("Cookie", sessionCookie+"=secret; other=1")
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%d", resp.StatusCode)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 1 || seen[0].URL.Path != c.guestPath || seen[0].Header.Get("Cookie") != "other=1" {
				t.Fatalf("the guest was asked %v, want one request for %s with Cookie other=1", requests(seen), c.guestPath)
			}
			checkGuestHeaders(t, resp.Header, c.own)
		})
	}
	// A WebSocket's 101 does not pass the response writer: its headers are
	// filtered on the way too.
	t.Run("101 by the path form", func(t *testing.T) {
		c, err := net.Dial("tcp", strings.TrimPrefix(rig.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET " + portPath(id, port, "/ws") + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 101 {
			t.Fatalf("%d", resp.StatusCode)
		}
		checkGuestHeaders(t, resp.Header, false)
	})
}

func requests(rs []*http.Request) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.URL.Path+" Cookie="+r.Header.Get("Cookie"))
	}
	return out
}

// checkGuestHeaders checks a guest's response as the browser gets it.
func checkGuestHeaders(t *testing.T, h http.Header, own bool) {
	t.Helper()
	cookies := h.Values("Set-Cookie")
	csp := h.Values("Content-Security-Policy")
	for _, c := range cookies {
		if strings.HasPrefix(c, sessionCookie+"=") || strings.Contains(c, "Domain=") {
			t.Errorf("the guest set %q", c)
		}
	}
	if !own {
		if len(cookies) != 0 || h.Get("Clear-Site-Data") != "" || h.Get("Service-Worker-Allowed") != "" {
			t.Errorf("on zeishd's origin the guest kept Set-Cookie %q, Clear-Site-Data %q, Service-Worker-Allowed %q",
				cookies, h.Get("Clear-Site-Data"), h.Get("Service-Worker-Allowed"))
		}
		if !slices.Contains(csp, guestSandboxCSP) || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("on zeishd's origin: Content-Security-Policy %q, X-Content-Type-Options %q; want the sandbox and nosniff", csp, h.Get("X-Content-Type-Options"))
		}
		return
	}
	if slices.Contains(csp, guestSandboxCSP) {
		t.Errorf("on its own origin the guest's page was sandboxed: %q", csp)
	}
	if h.Get("Clear-Site-Data") == "" || (!slices.Contains(cookies, "app=1; Path=/") && !slices.Contains(cookies, "ws=1; Path=/")) {
		t.Errorf("on its own origin the guest lost its headers: Set-Cookie %q, Clear-Site-Data %q", cookies, h.Get("Clear-Site-Data"))
	}
}

// A cookie a guest sets on its own origin stays there: none for a wider
// domain (zeishd's may be a parent of it), none in the console's name.
func TestOwnCookie(t *testing.T) {
	const host = "8080-sbx-abc.sbx.example.test"
	for _, c := range []struct {
		set  string
		keep bool
	}{
		{"a=1", true},
		{"a=1; Path=/; HttpOnly", true},
		{"a=1; Domain=" + host, true},
		{"a=1; domain=." + strings.ToUpper(host), true},
		{"a=1; Domain=", true},
		{"a=1; Domain=sbx.example.test", false},
		{"a=1; Domain=example.test", false},
		{"a=1; Domain=" + host + "; Domain=example.test", false},
		{"a=1;Domain =example.test", false},
		{sessionCookie + "=x; Path=/console", false},
		{" " + strings.ToUpper(sessionCookie) + "=x", false},
	} {
		if got := ownCookie(c.set, host+":443"); got != c.keep {
			t.Errorf("%q on %s: kept %v, want %v", c.set, host, got, c.keep)
		}
	}
}

// The console's session cookie goes back only to the host that set it
// (no Domain), only under /console, never with a request another site
// started (SameSite=Strict) and never to script (HttpOnly); with an https
// public URL it is Secure even behind a TLS proxy.
func TestConsoleCookieScope(t *testing.T) {
	for _, public := range []string{"", "https://zeish.example.test"} {
		rig, _ := newPortRig(t, Options{PublicURL: public}, nil, nil)
		keyPath, err := control.EnsureAdmin(t.Context(), rig.st, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(keyPath)
		key := strings.TrimSpace(string(b))
		req, _ := http.NewRequest("POST", rig.url+"/console/api/session", strings.NewReader(`{"api_key":"`+key+`"}`))
		req.Header.Set(consoleHeader, "1")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var c *http.Cookie
		for _, k := range resp.Cookies() {
			if k.Name == sessionCookie {
				c = k
			}
		}
		if resp.StatusCode != 200 || c == nil {
			t.Fatalf("sign in: %d %v", resp.StatusCode, resp.Header)
		}
		if c.Domain != "" || c.Path != "/console" || c.SameSite != http.SameSiteStrictMode || !c.HttpOnly || c.Secure != (public != "") {
			t.Errorf("public URL %q: session cookie %s", public, resp.Header.Get("Set-Cookie"))
		}
	}
}

// The URL the API gives a browser for a port is on the port's own origin:
// under the public domain, else under localhost when the server was
// reached on a loopback address, else none (a browser elsewhere needs a
// domain); never zeishd's own origin.
func TestBrowserURL(t *testing.T) {
	const id = "sbx_9h80ayv5qv2jaxex5ej0"
	for _, c := range []struct {
		name, public, domain, host, want string
	}{
		{"loopback", "", "", "127.0.0.1:7420", "http://8080-sbx-9h80ayv5qv2jaxex5ej0.localhost:7420/"},
		{"localhost", "", "", "localhost:7420", "http://8080-sbx-9h80ayv5qv2jaxex5ej0.localhost:7420/"},
		{"ipv6 loopback", "", "", "[::1]:7420", "http://8080-sbx-9h80ayv5qv2jaxex5ej0.localhost:7420/"},
		{"another machine without a domain", "http://10.1.2.3:7420", "", "10.1.2.3:7420", ""},
		{"public domain", "https://zeish.example.test", "sbx.example.test", "", "https://8080-sbx-9h80ayv5qv2jaxex5ej0.sbx.example.test/"},
		{"public domain on a port", "http://127.0.0.1:7420", ".sbx.example.test", "", "http://8080-sbx-9h80ayv5qv2jaxex5ej0.sbx.example.test:7420/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Server{opts: Options{PublicURL: c.public, PublicDomain: c.domain}}
			r, _ := http.NewRequest("GET", "http://"+c.host+"/", nil)
			r.Host = c.host
			got := s.browserURL(r, id, 8080)
			if got != c.want {
				t.Fatalf("browserURL = %q, want %q", got, c.want)
			}
			if got != "" {
				u, _ := url.Parse(got)
				if loopbackName(u.Hostname()) && u.Hostname() == "localhost" || strings.Contains(got, "/data/") {
					t.Fatalf("%s is not an origin of the port's own", got)
				}
			}
		})
	}
}
