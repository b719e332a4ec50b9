package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	zeish "github.com/zeish/zeish/sdk/go"
)

// screen is the shared test terminal; waitFor gives up after 60 s.
type screen struct{ *testenv.Screen }

func newScreen() *screen { return &screen{testenv.NewScreen()} }

func (s *screen) waitFor(t *testing.T, want string) {
	t.Helper()
	s.WaitFor(t, want, 60*time.Second)
}

// follow copies r into a new screen until r ends.
func follow(r io.Reader) (*screen, <-chan struct{}) {
	sc := newScreen()
	done := make(chan struct{})
	go func() {
		io.Copy(sc, r)
		close(done)
	}()
	return sc, done
}

// TestTerminal drives an interactive terminal through the public API on a
// real VM: size and resize, Ctrl-C, a dropped connection that only
// detaches, re-attach with scrollback, the exit code; and the refusals.
func TestTerminal(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 10*time.Minute)
	c := s.client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "term", MemoryMiB: 256}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	term, err := conn.Terminal(ctx, zeish.TerminalRequest{Rows: 24, Cols: 80, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Since(began)
	out, _ := follow(term)
	term.Write([]byte("stty size; echo user=$(id -un)\n"))
	out.waitFor(t, "24 80")
	out.waitFor(t, "user=root")
	if err := term.Resize(ctx, 50, 132); err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("stty size\n"))
	out.waitFor(t, "50 132")
	// Ctrl-C once the job has printed: by then it is the terminal's
	// foreground group (typed ahead, the shell's line editor would read the
	// byte as a character; right after the shell's own echo, the shell
	// would still be in the foreground).
	term.Write([]byte("sh -c 'echo sleeping; exec sleep 300'\n"))
	out.waitFor(t, "sleeping\r\n")
	term.Write([]byte("\x03"))
	term.Write([]byte("echo status=$?\n"))
	out.waitFor(t, "status=130")
	term.Write([]byte("echo mark-$((6*7))\n"))
	out.waitFor(t, "mark-42")
	// Keystroke to echo, for the report (no threshold: the CPU is shared).
	var rtts []time.Duration
	for i := range 15 {
		mark := fmt.Sprintf("k%02d", i)
		t0 := time.Now()
		term.Write([]byte(mark))
		out.waitFor(t, mark)
		rtts = append(rtts, time.Since(t0))
	}
	term.Write([]byte("\x15")) // Ctrl-U: drop the typed line
	slices.Sort(rtts)
	t.Logf("terminal: open %v; keystroke echo median %v (min %v, max %v, n=%d)", opened.Round(time.Millisecond),
		rtts[len(rtts)/2].Round(time.Millisecond), rtts[0].Round(time.Millisecond), rtts[len(rtts)-1].Round(time.Millisecond), len(rtts))
	pid := term.PID()
	term.Close() // a dropped connection: the shell must go on

	list, err := conn.Terminals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].PID != pid || list[0].Exited {
		t.Fatalf("terminals after the client left: %+v", list)
	}
	again, err := conn.AttachTerminal(ctx, pid, 30, 100)
	if err != nil {
		t.Fatal(err)
	}
	out2, _ := follow(again)
	out2.waitFor(t, "mark-42") // the scrollback
	again.Write([]byte("stty size; exit 9\n"))
	out2.waitFor(t, "30 100")
	res, err := again.Wait(ctx)
	if err != nil || res.ExitCode != 9 {
		t.Fatalf("exit: %+v %v, want 9", res, err)
	}

	// Signal through the API, and a non-root user.
	sleeper, err := conn.Terminal(ctx, zeish.TerminalRequest{Argv: []string{"sleep", "300"}, User: "nobody", Rows: 5, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, sleeper)
	if err := sleeper.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	if res, err := sleeper.Wait(ctx); err != nil || res.Signal != "SIGTERM" {
		t.Fatalf("signalled terminal: %+v %v", res, err)
	}

	// A zeishd restart replaces the whole channel to the guest: the shell
	// goes on, and the new zeishd attaches to it by pid.
	survivor, err := conn.Terminal(ctx, zeish.TerminalRequest{Rows: 24, Cols: 80, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	sOut, _ := follow(survivor)
	survivor.Write([]byte("X=kept-$((2*21))\n"))
	survivor.Write([]byte("echo set-$X\n"))
	sOut.waitFor(t, "set-kept-42")
	s.stop()
	if _, err := survivor.Wait(ctx); err == nil {
		t.Fatal("the terminal's connection outlived zeishd")
	}
	s.start()
	conn, err = c.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	back, err := conn.AttachTerminal(ctx, survivor.PID(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bOut, _ := follow(back)
	bOut.waitFor(t, "set-kept-42")
	back.Write([]byte("echo still-$X; exit 3\n"))
	bOut.waitFor(t, "still-kept-42")
	if res, err := back.Wait(ctx); err != nil || res.ExitCode != 3 {
		t.Fatalf("after the restart: %+v %v", res, err)
	}

	t.Run("refusals", func(t *testing.T) {
		acc, err := c.Access(ctx, sb.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimPrefix(acc.URL, "http://"+s.addr)
		for _, tc := range []struct {
			name, query string
			status      int
			code        string
		}{
			{"0x0", "rows=0&cols=0", 400, "invalid_argument"},
			{"no size", "", 400, "invalid_argument"},
			{"huge", "rows=24&cols=100000", 400, "invalid_argument"},
			{"bad user", "rows=24&cols=80&user=Bad%20User", 400, "invalid_argument"},
			{"unknown user", "rows=24&cols=80&user=ghost", 400, "invalid_argument"},
			{"missing command", "rows=24&cols=80&argv=no-such-cmd", 404, "file_not_found"},
			{"relative cwd", "rows=24&cols=80&cwd=tmp", 400, "invalid_argument"},
		} {
			status, body := wsDial(t, s, base+"/terminals/connect?"+tc.query, acc.Token, "")
			if status != tc.status || !strings.Contains(body, `"`+tc.code+`"`) {
				t.Errorf("%s: %d %s, want %d %s", tc.name, status, body, tc.status, tc.code)
			}
		}
		if status, body := wsDial(t, s, base+"/terminals/999999/connect", acc.Token, ""); status != 404 || !strings.Contains(body, "not_found") {
			t.Errorf("attach to an unknown pid: %d %s", status, body)
		}
		if status, body := wsDial(t, s, base+"/terminals/connect?rows=24&cols=80", "zdp_forged.acc_x.1.abc", ""); status != 401 {
			t.Errorf("forged token: %d %s", status, body)
		}
		if status, body := wsDial(t, s, base+"/terminals/connect?rows=24&cols=80", acc.Token, "http://evil.example"); status != 403 || !strings.Contains(body, "forbidden") {
			t.Errorf("cross-site WebSocket: %d %s", status, body)
		}
		if status, _, body := s.raw(t, "GET", base+"/terminals/connect?rows=24&cols=80", acc.Token, ""); status != 400 || !strings.Contains(string(body), "WebSocket") {
			t.Errorf("plain GET: %d %s", status, body)
		}
		if _, err := conn.Terminal(ctx, zeish.TerminalRequest{Rows: 0, Cols: 0}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("SDK let 0x0 through: %v", err)
		}

		// In a live terminal a 0x0 resize is refused in words, and the
		// terminal keeps its size; the token may also come as a query
		// parameter (browsers).
		ws, _, err := websocket.Dial(ctx, acc.URL+"/terminals/connect?rows=24&cols=80&argv=sh&access_token="+acc.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		events := make(chan api.TermEvent, 16)
		shown := newScreen()
		go func() {
			defer close(events)
			for {
				typ, p, err := ws.Read(ctx)
				if err != nil {
					return
				}
				if typ == websocket.MessageBinary {
					shown.Write(p)
					continue
				}
				var ev api.TermEvent
				json.Unmarshal(p, &ev)
				events <- ev
			}
		}()
		if ev := <-events; ev.Type != api.TermEventStarted || ev.PID <= 1 {
			t.Fatalf("first event %+v", ev)
		}
		for _, ctl := range []string{`{"type":"resize","rows":0,"cols":0}`, `{"type":"signal","signal":"BOGUS"}`, `{"type":"dance"}`, `not json`} {
			ws.Write(ctx, websocket.MessageText, []byte(ctl))
			if ev := <-events; ev.Type != api.TermEventRefused || ev.Error == nil || ev.Error.Code != "invalid_argument" {
				t.Errorf("control %s: got %+v, want refused invalid_argument", ctl, ev)
			}
		}
		ws.Write(ctx, websocket.MessageBinary, []byte("stty size; exit 0\n"))
		shown.waitFor(t, "24 80")
		if ev := <-events; ev.Type != api.TermEventExit || ev.Result == nil || ev.Result.ExitCode != 0 {
			t.Errorf("last event %+v", ev)
		}
	})

	t.Run("zeishctl shell", func(t *testing.T) { testShellCLI(t, s, sb.ID) })
}

// wsDial attempts a WebSocket upgrade and returns the refusal's status and body.
func wsDial(t *testing.T, s *server, path, token, origin string) (int, string) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "http://"+s.addr+path, &websocket.DialOptions{HTTPHeader: h,
		HTTPClient: &http.Client{Transport: newValidatingTransport(t)}})
	if err == nil {
		ws.CloseNow()
		return http.StatusSwitchingProtocols, ""
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// testShellCLI runs `zeishctl shell` on a pseudo-terminal, as a person would.
func testShellCLI(t *testing.T, s *server, id string) {
	cmd := exec.Command(filepath.Join(bin, "zeishctl"), "shell", id)
	cmd.Env = append(os.Environ(), "ZEISH_API_URL="+s.url(), "ZEISH_API_KEY="+s.key)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 101})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	out, _ := follow(ptmx)

	ptmx.Write([]byte("stty size\n"))
	out.waitFor(t, "33 101")
	// The window changes: the client's terminal gets SIGWINCH and zeishctl
	// passes the new size on.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 41, Cols: 117}); err != nil {
		t.Fatal(err)
	}
	// Until zeishctl has seen the SIGWINCH the guest may answer the old size.
	for i := 0; !strings.Contains(out.String(), "41 117"); i++ {
		ptmx.Write([]byte("stty size\n"))
		select {
		case <-out.Changed():
		case <-time.After(time.Second):
		}
		if i > 60 {
			t.Fatalf("the resize never reached the guest: %q", out.String())
		}
	}
	// Raw mode: Ctrl-C is a byte for the guest, not a signal for zeishctl.
	ptmx.Write([]byte("sh -c 'echo sleeping; exec sleep 300'\n"))
	out.waitFor(t, "sleeping\r\n")
	ptmx.Write([]byte("\x03"))
	ptmx.Write([]byte("echo rc=$?\n"))
	out.waitFor(t, "rc=130")
	ptmx.Write([]byte("exit 23\n"))
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 23 {
			t.Fatalf("zeishctl shell ended with %v, want exit status 23", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("zeishctl shell did not end after exit; screen %q", out.String())
	}

	// --user and a command.
	cmd = exec.Command(filepath.Join(bin, "zeishctl"), "shell", id, "--user", "nobody", "--", "sh", "-c", "echo uid=$(id -u); exit 4")
	cmd.Env = append(os.Environ(), "ZEISH_API_URL="+s.url(), "ZEISH_API_KEY="+s.key)
	ptmx2, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx2.Close()
	out2, _ := follow(ptmx2)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Fatalf("shell --user nobody: %v; screen %q", err, out2.String())
	}
	out2.waitFor(t, "uid=65534")

	// Without a terminal it refuses (usage error), rather than hang.
	_, errOut, code := s.zeishctl(t, "", "shell", id)
	if code != 2 || !strings.Contains(errOut, "terminal") {
		t.Fatalf("shell without a terminal: exit %d %q", code, errOut)
	}
}
