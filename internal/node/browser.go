package node

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// BrowserStartTimeout bounds the wait for Chromium's DevTools endpoint after
// it is started: under TCG on one busy vCPU its first start can take
// minutes.
const BrowserStartTimeout = 8 * time.Minute

// browserScript starts Chromium's headless shell with the DevTools protocol
// unless it already answers (a fork of a sandbox whose browser runs keeps
// it, pages and all), under a loop that starts it again should it exit (a
// client that sends Browser.close), in a session of its own so the exec
// that started it may end. It then waits until the endpoint answers; if
// Chromium keeps dying it fails at once with the end of its log. $1 is the
// port, $2 the forwarder's source.
//
// The headless shell, not the full browser: it has no browser UI to draw,
// so it starts in a fraction of the time under TCG. Chromium serves the
// protocol on the loopback only (it ignores --remote-debugging-address), at
// port+1; the data plane reaches the guest over its network link, so a
// forwarder serves port on every address (only the host is on that link).
// The profile lives in the user's home, on the sandbox's disk, so forks and
// snapshots carry cookies and storage.
const browserScript = `
port=$1 inner=$(($1 + 1))
up() { curl -sf -o /dev/null --max-time 5 "http://127.0.0.1:$port/json/version"; }
if up; then echo already running; exit 0; fi
bin=$(command -v chromium-headless-shell || echo /usr/lib/chromium/chromium-headless-shell)
dir=$HOME/.cache/zeish-browser
mkdir -p "$dir"
log=$dir/chromium.log
: >"$log"
rm -f "$dir/loop.pid"
setsid -f sh -c '
  echo $$ >"$HOME/.cache/zeish-browser/loop.pid"
  while :; do python3 -c "$4" "$2" "$3"; echo "forwarder exited: $?"; sleep 1; done &
  while :; do
    "$1" --remote-debugging-port="$3" \
      --user-data-dir="$HOME/.config/zeish-browser" --no-first-run --no-default-browser-check \
      --disable-gpu --disable-dev-shm-usage --disable-background-networking --disable-component-update \
      --disable-sync --no-pings --mute-audio --window-size=1280,800 about:blank
    echo "chromium exited: $?"
    sleep 1
  done' zeish-browser "$bin" "$port" "$inner" "$2" >>"$log" 2>&1 </dev/null
while ! up; do
  if [ "$(grep -c '^chromium exited' "$log")" -ge 3 ]; then echo "chromium keeps exiting:"; tail -c 2000 "$log"; exit 1; fi
  sleep 1
done
echo started
`

// browserForwarder serves argv[1] on every address of the guest from
// 127.0.0.1:argv[2], byte for byte (HTTP and WebSockets alike).
const browserForwarder = `
import asyncio, sys
public, inner = int(sys.argv[1]), int(sys.argv[2])

async def pipe(r, w):
    try:
        while True:
            data = await r.read(65536)
            if not data:
                break
            w.write(data)
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()

async def serve(r, w):
    try:
        ur, uw = await asyncio.open_connection("127.0.0.1", inner)
    except OSError:
        w.close()
        return
    await asyncio.gather(pipe(r, uw), pipe(ur, w))

async def main():
    srv = await asyncio.start_server(serve, "0.0.0.0", public, reuse_address=True)
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
`

// browserStopScript ends the browser a fork inherited but was told not to
// have: the loop and Chromium are one process group (setsid above).
const browserStopScript = `
port=$1
pidfile=$HOME/.cache/zeish-browser/loop.pid
[ -s "$pidfile" ] || { echo none; exit 0; }
group=$(cat "$pidfile")
kill -TERM -- -"$group" 2>/dev/null
for i in $(seq 30); do
  curl -sf -o /dev/null --max-time 5 "http://127.0.0.1:$port/json/version" || break
  sleep 1
done
kill -KILL -- -"$group" 2>/dev/null
rm -f "$pidfile"
echo stopped
`

// syncBrowser makes the sandbox's browser match its browser field before
// it reports running: started when asked for (and the template carries
// it); stopped in a fork told browser: false whose parent's browser ran.
func (n *Node) syncBrowser(ctx context.Context, r *store.SandboxRecord) error {
	if !r.Browser && !n.inheritsBrowser(ctx, r) {
		return nil
	}
	tpl, err := n.opts.Templates.Get(ctx, r.Template)
	if err != nil {
		return fmt.Errorf("browser: template %s: %w", r.Template, err)
	}
	if !tpl.Has(sandbox.FeatureBrowser) {
		// Only a sandbox recorded before templates had features gets here:
		// the API refuses browser on such a template.
		n.log.Warn("browser asked on a template without it", logSandbox, r.ID, "template", r.Template)
		return nil
	}
	c := n.agents.Live(r.ID)
	if c == nil {
		return fmt.Errorf("browser: the guest agent is not connected")
	}
	script := browserScript
	if !r.Browser {
		script = browserStopScript
	}
	start := time.Now()
	out, err := runBrowserScript(ctx, c, script)
	if err != nil {
		return err
	}
	n.log.Info("browser", logSandbox, r.ID, "state", out, "ms", time.Since(start).Milliseconds())
	return nil
}

// inheritsBrowser reports whether r is a fork of a sandbox with a browser.
func (n *Node) inheritsBrowser(ctx context.Context, r *store.SandboxRecord) bool {
	if r.ParentID == "" {
		return false
	}
	p, err := n.opts.Store.GetSandbox(ctx, r.ParentID)
	return err == nil && p.Browser
}

func runBrowserScript(ctx context.Context, c *guest.Client, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, BrowserStartTimeout)
	defer cancel()
	var out bytes.Buffer
	res, err := c.Exec(ctx, guest.ExecRequest{
		Argv: []string{"bash", "-c", script, "zeish-browser", strconv.Itoa(sandbox.BrowserPort), browserForwarder},
		User: sandbox.BrowserUser, Timeout: BrowserStartTimeout,
	}, nil, &out, &out)
	switch {
	case err != nil:
		return "", fmt.Errorf("browser: %w", err)
	case res.TimedOut:
		return "", fmt.Errorf("browser: chromium's DevTools endpoint did not answer within %s: %s", BrowserStartTimeout, tailString(out.String(), 1500))
	case res.ExitCode != 0:
		return "", fmt.Errorf("browser: chromium did not start: %s", tailString(out.String(), 1500))
	}
	return strings.TrimSpace(out.String()), nil
}

func tailString(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
