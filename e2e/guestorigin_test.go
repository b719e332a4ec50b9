package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// hostileGuestPage is the page a guest serves on a public port: its script
// tries to mint an admin API key through the console's API every way a
// page can (same origin, the console's origin with and without the console
// header), to read the console's session and its cookies, then to set a
// cookie in the session's name, and writes what happened into #out.
// CONSOLE is replaced by the console's origin.
const hostileGuestPage = `<!doctype html><html><head><title>guest page</title></head><body><pre id="out"></pre><script>
(async () => {
  const CONSOLE = "{{CONSOLE}}";
  const mint = "/console/api/v1/admin/accounts/acc_admin/keys";
  const out = {origin: self.origin, href: location.href};
  try { out.cookie = document.cookie; } catch (e) { out.cookie = "unreadable: " + e.name; }
  const attempt = async (name, url, init) => {
    try { const r = await fetch(url, init); out[name] = r.status + " " + r.type + " " + (await r.text()).slice(0, 80); }
    catch (e) { out[name] = "refused: " + e.name; }
  };
  const headers = {"X-Zeish-Console": "1", "Content-Type": "application/json"};
  await attempt("mint_here", mint, {method: "POST", credentials: "include", headers, body: "{}"});
  await attempt("mint_console", CONSOLE + mint, {method: "POST", credentials: "include", headers, body: "{}"});
  await attempt("mint_simple", CONSOLE + mint, {method: "POST", credentials: "include", mode: "no-cors", body: "{}"});
  await attempt("session_here", "/console/api/session", {credentials: "include"});
  await attempt("session_console", CONSOLE + "/console/api/session", {credentials: "include"});
  await attempt("toss", "toss", {credentials: "include"}); // a cookie in the session's name, last
  document.getElementById("out").textContent = JSON.stringify(out);
})();
</script></body></html>`

// TestGuestPortsCannotReachTheConsole proves, in real Chromium against a
// real guest, that a page a guest serves on a public port cannot act as
// the console user who opens it: a signed-in console user opens the page
// every way there is (the link the console's Ports tab shows, the path
// form …/ports/8080/ on zeishd's origin, the host form
// 8080-<id>.localhost), its script tries to mint an admin API key, and no
// key is minted; no page runs on the console's origin (the path form runs
// as an opaque origin), the console never links the path form, no cookie
// of the guest lands on the console's origin and the console's session
// cookie never reaches the guest.
func TestGuestPortsCannotReachTheConsole(t *testing.T) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(chromium); err != nil {
		testskip.Skip(t, "no Chromium at %s (set CHROMIUM)", chromium)
	}
	began := time.Now()
	s, lab := startLabServer(t)
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	console := "http://" + s.addr // the relay on the host's loopback: where a user's browser reaches zeishd
	if resp, err := http.Get(console + "/console/"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "make build") {
			testskip.Skip(t, "zeishd was built without the console bundle: run make build (make test does)")
		}
	}

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "hostile", MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	g := newNetGuest(t, s, sb)
	if _, err := g.conn.WriteFile(ctx, "/root/page.html", strings.NewReader(strings.ReplaceAll(hostileGuestPage, "{{CONSOLE}}", console)), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, g.conn, "sh", "-c", "/root/nettool page 8080 /root/page.html </dev/null >/dev/null 2>&1 &")
	waitDial(t, lab.Node, sb.Address+":8080")
	port, err := c.SetPort(ctx, sb.ID, 8080, true)
	if err != nil {
		t.Fatal(err)
	}
	keysBefore, err := c.ListAPIKeys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}

	browser := hostChromium(t, ctx, chromium)
	// Sign in to the console as a user does.
	if err := chromedp.Do(browser,
		chromedp.Navigate(console+"/console/"),
		chromedp.WaitVisible(chromedp.ID("apikey")),
		chromedp.SendKeys(chromedp.ID("apikey"), s.key),
		chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("sandboxes")),
	); err != nil {
		t.Fatalf("sign in to the console: %v", err)
	}
	session := consoleSession(t, browser, console)
	if session == "" {
		t.Fatal("signed in, but the browser holds no session cookie")
	}

	// The link the console shows for the public port.
	if err := chromedp.Do(browser,
		chromedp.Navigate(console+"/console/#/sandboxes/"+sb.ID+"/ports"),
		chromedp.WaitVisible(chromedp.CSS(`#ports tr[data-port="8080"][data-public="true"] a`)),
	); err != nil {
		t.Fatalf("the console's Ports tab: %v", err)
	}
	links, err := chromedp.Run(browser, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("a[href]")).map(a => a.href)`))
	if err != nil {
		t.Fatal(err)
	}
	var shown string
	for _, l := range links {
		if strings.Contains(l, api.DataPath) {
			t.Errorf("the console links the path form %s", l)
		}
		if strings.Contains(l, "8080-") {
			shown = l
		}
	}
	host := "http://8080-" + strings.Replace(sb.ID, "_", "-", 1) + ".localhost:" + s.addr[strings.LastIndex(s.addr, ":")+1:] + "/"
	if shown != host || port.BrowserURL != host {
		t.Fatalf("the console shows %q and the API %q for the public port, want its own origin %s (links: %q)", shown, port.BrowserURL, host, links)
	}

	for _, way := range []struct{ name, url, origin string }{
		{"the console's link", shown, strings.TrimSuffix(host, "/")},
		{"the path form", console + api.DataPath + "/sandboxes/" + sb.ID + "/ports/8080/", "null"},
		{"the path form, deeper", console + api.DataPath + "/sandboxes/" + sb.ID + "/ports/8080/console/x", "null"},
		{"the host form", host + "console/api/session", strings.TrimSuffix(host, "/")},
	} {
		t.Run(way.name, func(t *testing.T) {
			out := attack(t, browser, way.url)
			t.Logf("%s (%s): %v", way.name, way.url, out)
			if out["origin"] != way.origin || out["origin"] == console {
				t.Errorf("the guest's page ran as origin %q, want %q (never the console's %s)", out["origin"], way.origin, console)
			}
			for _, k := range []string{"mint_here", "mint_console", "mint_simple", "session_here", "session_console"} {
				// On its own origin a relative URL is the guest's own page.
				if strings.HasPrefix(out[k], "2") && !strings.Contains(out[k], "<!doctype html>") {
					t.Errorf("%s: the guest's page got the console's answer %s", k, out[k])
				}
			}
			if strings.Contains(out["cookie"], "zeish_session") {
				t.Errorf("the guest's page reads the cookie %q", out["cookie"])
			}
		})
	}

	// Ground truth: no key was minted, the console's cookies are its own,
	// and the guest never saw the session.
	keysAfter, err := c.ListAPIKeys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(keysAfter) != len(keysBefore) {
		t.Fatalf("the guest's pages minted API keys: %d before, %d after", len(keysBefore), len(keysAfter))
	}
	if now := consoleSession(t, browser, console); now != session {
		t.Fatalf("the console's session cookie changed from %q to %q", session, now)
	}
	cookies := allCookies(t, browser, console+"/console/", console+"/")
	for _, ck := range cookies {
		if ck.Name != "zeish_session" {
			t.Errorf("the guest set cookie %s=%s on the console's origin (%s%s)", ck.Name, ck.Value, ck.Domain, ck.Path)
		}
	}
	if seen := shell(t, g.conn, "cat /root/page.html.cookies"); strings.Contains(seen, "zeish_session="+session) || strings.Contains(seen, session) {
		t.Fatalf("the guest saw the console's session:\n%s", seen)
	}
	t.Logf("no page of the guest acted as the console user (%d API keys before and after); test took %s", len(keysAfter), time.Since(began).Round(time.Second))
}

// hostChromium starts the host's Chromium (headless, a profile of its
// own) and returns its first tab; it ends with the test.
func hostChromium(t *testing.T, ctx context.Context, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-component-update", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(ctx), opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return tab
}

// attack opens url in a tab of its own and waits for the guest's script to
// report what it could do.
func attack(t *testing.T, browser context.Context, url string) map[string]string {
	t.Helper()
	tab, cancel := chromedp.NewContext(browser)
	defer cancel()
	if err := chromedp.Do(tab, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	var report string
	for deadline := time.Now().Add(2 * time.Minute); report == ""; time.Sleep(100 * time.Millisecond) {
		var err error
		if report, err = chromedp.Run(tab, chromedp.Evaluate[string](`(document.getElementById("out") || {}).textContent || ""`)); err != nil {
			t.Fatalf("read %s: %v", url, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page at %s never reported", url)
		}
	}
	out := map[string]string{}
	if err := json.Unmarshal([]byte(report), &out); err != nil {
		t.Fatalf("the page's report %q: %v", report, err)
	}
	return out
}

// consoleSession is the value of the console's session cookie the browser
// holds for the console.
func consoleSession(t *testing.T, browser context.Context, console string) string {
	t.Helper()
	for _, ck := range allCookies(t, browser, console+"/console/") {
		if ck.Name == "zeish_session" {
			return ck.Value
		}
	}
	return ""
}

// allCookies are the cookies the browser would send to any of urls.
func allCookies(t *testing.T, browser context.Context, urls ...string) []*network.Cookie {
	t.Helper()
	res, err := chromedp.Call(browser, network.GetCookies, network.GetCookiesParams{URLs: urls})
	if err != nil {
		t.Fatal(err)
	}
	return res.Cookies
}
