package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// sitePage is the page the sandbox serves itself; otherPage is where the
// parent goes once the two diverge.
const (
	siteURL   = "http://127.0.0.1:8000/"
	otherURL  = "http://127.0.0.1:8000/other.html"
	siteSetup = `mkdir -p ~/site && cd ~/site &&
echo '<html><head><title>zeish page</title></head><body><p id="msg">served in the guest</p></body></html>' > index.html &&
echo '<html><head><title>other page</title></head><body><p id="msg">other</p></body></html>' > other.html &&
setsid -f python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 </dev/null &&
until curl -sf -o /dev/null http://127.0.0.1:8000/; do sleep 0.5; done; echo serving`
)

// pageState is what a tab shows: where it is, its title, the DOM text the
// test changes and the cookies of the page.
type pageState struct {
	Href   string `json:"href"`
	Title  string `json:"title"`
	Msg    string `json:"msg"`
	Cookie string `json:"cookie"`
}

const readState = `({href: location.href, title: document.title,
  msg: (document.getElementById('msg') || {}).textContent || '',
  cookie: (() => { try { return document.cookie } catch (e) { return 'unreadable: ' + e } })()})`

// openBrowser connects chromedp to a sandbox's browser through the URL the
// API gave, as any remote-browser client would, and returns the
// browser-level context. Cancelling it (at cleanup) ends the connection
// and, as chromedp does with a remote browser, asks it to close (the guest
// starts it again).
func openBrowser(t *testing.T, ctx context.Context, cdpURL string) context.Context {
	t.Helper()
	alloc, cancelAlloc := remote.NewAllocator(ctx, cdpURL)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("connect to %s: %v", cdpURL, err)
	}
	return browser
}

// newTab opens a tab of its own in the browser.
func newTab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return tab
}

// tabShowing attaches to the browser's tab that shows url, as a client
// that comes back to a browser finds its page.
func tabShowing(t *testing.T, browser context.Context, url string) context.Context {
	t.Helper()
	targets, err := chromedp.Targets(browser)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, tg := range targets {
		seen = append(seen, string(tg.Type)+" "+tg.URL)
		if tg.Type == "page" && tg.URL == url {
			tab, cancel := chromedp.NewContext(browser, chromedp.WithTargetID(tg.TargetID))
			t.Cleanup(cancel)
			if err := chromedp.Do(tab); err != nil {
				t.Fatalf("attach to the tab showing %s: %v", url, err)
			}
			return tab
		}
	}
	t.Fatalf("no tab shows %s; the browser has %q", url, seen)
	return nil
}

func stateOf(t *testing.T, tab context.Context) pageState {
	t.Helper()
	st, err := chromedp.Run(tab, chromedp.Evaluate[pageState](readState))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return st
}

func evalJS(t *testing.T, tab context.Context, js string) {
	t.Helper()
	if _, err := chromedp.Run(tab, chromedp.Evaluate[any](js)); err != nil {
		t.Fatalf("evaluate %q: %v", js, err)
	}
}

func wantState(t *testing.T, who string, got, want pageState) {
	t.Helper()
	if got != want {
		t.Errorf("%s's browser shows %+v, want %+v", who, got, want)
	}
}

func wantAPICode(t *testing.T, what string, err error, code, inMessage string) {
	t.Helper()
	var apiErr *zeish.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != code || apiErr.Status != 400 || !strings.Contains(apiErr.Message, inMessage) {
		t.Errorf("%s: %v, want 400 %s saying %q", what, err, code, inMessage)
	}
}

// TestBrowser proves browser: true on real VMs with real Chromium: the
// desktop template's sandbox serves a page to itself, chromedp drives the
// sandbox's browser through the URL the API gives (the data plane's
// DevTools proxy), a fork's browser shows the same page, DOM and cookies,
// and the two then go their own ways; a fork may switch the browser on;
// templates without Chromium refuse it, and nothing is made.
func TestBrowser(t *testing.T) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testskip.Skip(t, "mmdebstrap not installed (scripts/deps.sh)")
	}
	testenv.RequireQEMU(t)
	testenv.DesktopTemplate(t) // built once into the shared cache (minutes the first time)
	// The data plane reaches guest ports over the sandboxes' network: zeishd
	// runs in the test's own network lab, with nothing beyond it.
	s, _ := startLabServer(t, "ZEISH_DESKTOP_TEMPLATE=on")
	ctx := ctxFor(t, 45*time.Minute)
	c := s.client

	// A template without Chromium refuses browser and desktop, naming one
	// that has them, and makes nothing.
	for _, req := range []api.CreateSandboxRequest{
		{Template: "base", Browser: true},
		{Template: "base", Desktop: true},
		{Browser: true, Desktop: true}, // the default template (base here)
	} {
		_, err := c.CreateSandbox(ctx, req)
		wantAPICode(t, "create "+req.Template, err, errdefs.ErrLacksFeature.Code, `use template "desktop"`)
	}
	if list, err := c.ListSandboxes(ctx, zeish.ListOptions{}); err != nil || len(list) != 0 {
		t.Fatalf("refused creates made sandboxes: %+v %v", list, err)
	}
	tpls, err := c.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range tpls {
		want := tpl.Name == "desktop"
		if tpl.Has(sandbox.FeatureBrowser) != want || tpl.Has(sandbox.FeatureDesktop) != want {
			t.Errorf("template %s lists features %v", tpl.Name, tpl.Features)
		}
	}
	// Nor may a fork switch it on there.
	plain, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "base", Name: "plain", MemoryMiB: 256}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CloneSandbox(ctx, plain.ID, api.CloneRequest{Browser: ptr(true)})
	wantAPICode(t, "fork of base with browser", err, errdefs.ErrLacksFeature.Code, `template "base" has no browser`)
	if _, err := c.Browser(ctx, plain.ID, 0); err == nil {
		t.Error("GET …/browser of a sandbox without one succeeded")
	} else {
		wantAPICode(t, "browser of a sandbox without one", err, errdefs.ErrInvalidArgument.Code, "has no browser")
	}
	if _, err := c.DeleteSandbox(ctx, plain.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}

	// The browser is up before the sandbox reports running.
	began := time.Now()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "desktop", Name: "web", Browser: true, MemoryMiB: 2048}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning || !sb.Browser {
		t.Fatalf("create with browser: %+v %v", sb, err)
	}
	t.Logf("create with browser: running after %s", time.Since(began).Round(time.Millisecond))
	conn := connect(t, c, sb.ID)
	var out, errOut bytes.Buffer
	res, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"bash", "-c", siteSetup + `; pgrep -u user -f '[/]usr/lib/chromium/chromium-headless-shell' >/dev/null && echo browser runs as user`}, User: "user"}, &out, &errOut)
	if err != nil || res.ExitCode != 0 || out.String() != "serving\nbrowser runs as user\n" {
		t.Fatalf("serve the page: %v %+v %q %q", err, res, out.String(), errOut.String())
	}

	b, err := c.Browser(ctx, sb.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantURL := regexp.MustCompile(`^ws://` + regexp.QuoteMeta(s.addr) + `/data/v1/sandboxes/` + sb.ID + `/browser/devtools/browser/[0-9a-f-]+\?token=zdp_`)
	if !wantURL.MatchString(b.CDPURL) || !strings.Contains(b.Version, "Chrome/") || b.ProtocolVersion == "" {
		t.Fatalf("browser endpoint: %+v", b)
	}
	// The HTTP endpoints answer with the token as a header, not without it.
	// (Plain HTTP: like the port proxy's, these paths pass through to the
	// guest, which the API document describes as one operation.)
	if st, body := getWithToken(t, ctx, b.HTTPURL+"/json/version", b.Token); st != 200 ||
		!strings.Contains(body, `"webSocketDebuggerUrl":"ws://`+s.addr+`/data/v1/sandboxes/`+sb.ID+`/browser/devtools/browser/`) {
		t.Errorf("json/version: %d %s", st, body)
	}
	if st, body := getWithToken(t, ctx, b.HTTPURL+"/json/version", ""); st != 401 {
		t.Errorf("json/version without a token: %d %s", st, body)
	}

	parent := newTab(t, openBrowser(t, ctx, b.CDPURL))
	if err := chromedp.Do(parent, chromedp.Navigate(siteURL)); err != nil {
		t.Fatal(err)
	}
	if title, err := chromedp.Run(parent, chromedp.Title()); err != nil || title != "zeish page" {
		t.Fatalf("title of the page served in the guest: %q %v", title, err)
	}
	evalJS(t, parent, `document.cookie = "flavour=parent; max-age=3600"; document.getElementById('msg').textContent = 'set by parent'`)
	shared := pageState{Href: siteURL, Title: "zeish page", Msg: "set by parent", Cookie: "flavour=parent"}
	wantState(t, "parent", stateOf(t, parent), shared)

	// The fork's browser has the same tab, DOM and cookies.
	resp, err := c.CloneSandbox(ctx, sb.ID, api.CloneRequest{Name: "web-kid"}, zeish.Wait())
	if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning || !resp.Sandboxes[0].Browser {
		t.Fatalf("fork: %+v %v", resp, err)
	}
	t.Logf("fork with the browser open: parent paused %d ms", resp.PauseMS)
	kidID := resp.Sandboxes[0].ID
	kb, err := c.Browser(ctx, kidID, 0)
	if err != nil {
		t.Fatal(err)
	}
	kid := tabShowing(t, openBrowser(t, ctx, kb.CDPURL), siteURL)
	wantState(t, "child", stateOf(t, kid), shared)
	wantState(t, "parent", stateOf(t, parent), shared)

	// Then they diverge: each sees only its own changes.
	evalJS(t, kid, `document.cookie = "flavour=kid; max-age=3600"; document.getElementById('msg').textContent = 'set by kid'`)
	if err := chromedp.Do(parent, chromedp.Navigate(otherURL)); err != nil {
		t.Fatal(err)
	}
	wantState(t, "child", stateOf(t, kid), pageState{Href: siteURL, Title: "zeish page", Msg: "set by kid", Cookie: "flavour=kid"})
	wantState(t, "parent", stateOf(t, parent), pageState{Href: otherURL, Title: "other page", Msg: "other", Cookie: "flavour=parent"})

	// A fork may switch the browser off, and a fork of that on again: the
	// child then starts one of its own.
	off, err := c.CloneSandbox(ctx, sb.ID, api.CloneRequest{Name: "no-browser", Browser: ptr(false)}, zeish.Wait())
	if err != nil || off.Sandboxes[0].Browser {
		t.Fatalf("fork with browser off: %+v %v", off, err)
	}
	if _, err := c.Browser(ctx, off.Sandboxes[0].ID, 0); err == nil {
		t.Error("GET …/browser of a fork with browser: false succeeded")
	}
	// The browser it inherited is stopped.
	if got := shell(t, connect(t, c, off.Sandboxes[0].ID), `curl -s -o /dev/null --max-time 5 http://127.0.0.1:9222/json/version; echo "curl $?"; pgrep -c -f '[/]usr/lib/chromium/chromium-headless-shell' || true`); got != "curl 7\n0" {
		t.Errorf("fork with browser: false: the inherited browser still runs: %q", got)
	}
	on, err := c.CloneSandbox(ctx, off.Sandboxes[0].ID, api.CloneRequest{Name: "browser-again", Browser: ptr(true)}, zeish.Wait())
	if err != nil || on.Sandboxes[0].State != sandbox.StateRunning || !on.Sandboxes[0].Browser {
		t.Fatalf("fork switching the browser on: %+v %v", on, err)
	}
	again := newTab(t, openBrowser(t, ctx, mustBrowser(t, ctx, c, on.Sandboxes[0].ID).CDPURL))
	if err := chromedp.Do(again, chromedp.Navigate(siteURL)); err != nil {
		t.Fatal(err)
	}
	if title, err := chromedp.Run(again, chromedp.Title()); err != nil || title != "zeish page" {
		t.Errorf("browser switched on at fork: title %q %v", title, err)
	}
	for _, line := range regexp.MustCompile(`(?m)^.*msg=browser .*$`).FindAllString(s.logText(), -1) {
		t.Log(line)
	}
}

func getWithToken(t *testing.T, ctx context.Context, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func mustBrowser(t *testing.T, ctx context.Context, c *zeish.Client, id string) zeish.Browser {
	t.Helper()
	b, err := c.Browser(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
