//go:build linux

package guest

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
)

// screen is the shared test terminal; waitFor gives up after 10 s.
type screen struct{ *testenv.Screen }

func newScreen() *screen { return &screen{testenv.NewScreen()} }

func (s *screen) waitFor(t *testing.T, want string) {
	t.Helper()
	s.WaitFor(t, want, 10*time.Second)
}

func shell(t *testing.T, c *Client, out *screen) *Terminal {
	t.Helper()
	term, err := c.Terminal(ctxT(t, 10*time.Second), TermRequest{
		Argv: []string{"/bin/sh"}, Env: map[string]string{"PS1": "$ "}, Size: TermSize{Rows: 24, Cols: 80},
	}, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return term
}

func result(t *testing.T, term *Terminal) ExecResult {
	t.Helper()
	select {
	case <-term.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("terminal process never ended")
	}
	res, err := term.Result()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestTerminalSizeInputExit(t *testing.T) {
	c := startAgent(t).connect(t)
	out := newScreen()
	term := shell(t, c, out)
	term.Write([]byte("stty size; tty\n"))
	out.waitFor(t, "24 80\r\n/dev/pts/")
	if err := term.Resize(TermSize{Rows: 40, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("stty size\n"))
	out.waitFor(t, "40 132")

	// Ctrl-C reaches the foreground job through the line discipline.
	term.Write([]byte("sh -c 'echo sleeping; exec sleep 100'\n"))
	out.waitFor(t, "sleeping\r\n")
	term.Write([]byte("\x03"))
	term.Write([]byte("echo status=$?\n"))
	out.waitFor(t, "status=130")

	term.Write([]byte("exit 3\n"))
	if res := result(t, term); res.ExitCode != 3 || res.PID != term.PID() {
		t.Fatalf("result %+v, want exit 3 of pid %d", res, term.PID())
	}
}

func TestTerminalSignal(t *testing.T) {
	c := startAgent(t).connect(t)
	term, err := c.Terminal(ctxT(t, 10*time.Second), TermRequest{Argv: []string{"sleep", "100"}, Size: TermSize{Rows: 5, Cols: 20}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if err := term.Signal("SIGNOPE"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unknown signal: %v", err)
	}
	if err := term.Signal("INT"); err != nil {
		t.Fatal(err)
	}
	if res := result(t, term); res.ExitCode != -1 || res.Signal != "SIGINT" {
		t.Fatalf("result %+v, want killed by SIGINT", res)
	}
}

// A dropped host only detaches: the process goes on, and a new host (as after
// a zeishd restart) attaches by pid, gets the scrollback and the exit code.
func TestTerminalDetachAttach(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	out := newScreen()
	term := shell(t, c, out)
	term.Write([]byte("echo before-$((6*7))\n"))
	out.waitFor(t, "before-42")
	pid := term.PID()
	c.Close() // the whole session goes, as when zeishd restarts

	c2 := a.connect(t)
	list, err := c2.Terminals(ctxT(t, 5*time.Second))
	if err != nil || len(list) != 1 || list[0].PID != pid || list[0].Exited {
		t.Fatalf("terminals after the host left: %+v %v", list, err)
	}
	out2 := newScreen()
	again, err := c2.AttachTerminal(ctxT(t, 10*time.Second), pid, &TermSize{Rows: 30, Cols: 90}, out2)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	out2.waitFor(t, "before-42") // scrollback
	again.Write([]byte("stty size; exit 7\n"))
	out2.waitFor(t, "30 90")
	if res := result(t, again); res.ExitCode != 7 {
		t.Fatalf("result %+v, want 7", res)
	}
	// Collected: it is gone now.
	if list, _ := c2.Terminals(ctxT(t, 5*time.Second)); len(list) != 0 {
		t.Fatalf("terminals after the exit was collected: %+v", list)
	}
	if _, err := c2.AttachTerminal(ctxT(t, 5*time.Second), pid, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("attach to a collected terminal: %v", err)
	}
}

// A process that exits while nobody is attached keeps its exit code for the
// next attach.
func TestTerminalExitWhileDetached(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	out := newScreen()
	term := shell(t, c, out)
	term.Write([]byte("read x; echo got-$x; exit 5\n"))
	out.waitFor(t, "read x")
	pid := term.PID()
	term.Close()

	c2 := a.connect(t)
	out2 := newScreen()
	again, err := c2.AttachTerminal(ctxT(t, 10*time.Second), pid, nil, out2)
	if err != nil {
		t.Fatal(err)
	}
	again.Write([]byte("line\n"))
	out2.waitFor(t, "got-line")
	again.Close()
	waitReaped(t, pid)

	out3 := newScreen()
	last, err := c2.AttachTerminal(ctxT(t, 10*time.Second), pid, nil, out3)
	if err != nil {
		t.Fatal(err)
	}
	if res := result(t, last); res.ExitCode != 5 {
		t.Fatalf("result %+v, want 5", res)
	}
	if !strings.Contains(out3.String(), "got-line") {
		t.Fatalf("scrollback %q lacks the output", out3.String())
	}
}

// A second attach takes the terminal over; the first is told why it lost it.
func TestTerminalTakeover(t *testing.T) {
	c := startAgent(t).connect(t)
	first := shell(t, c, newScreen())
	second, err := c.AttachTerminal(ctxT(t, 10*time.Second), first.PID(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	<-first.Done()
	if _, err := first.Result(); !errors.Is(err, errdefs.ErrInvalidState) {
		t.Fatalf("the first host got %v, want invalid_state", err)
	}
	second.Write([]byte("exit 0\n"))
	if res := result(t, second); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
}

// A detached terminal nobody comes back for is killed after the linger time.
func TestTerminalLingerExpires(t *testing.T) {
	a := startAgent(t)
	a.srv.linger = 200 * time.Millisecond
	c := a.connect(t)
	term, err := c.Terminal(ctxT(t, 10*time.Second), TermRequest{Argv: []string{"sleep", "100"}, Size: TermSize{Rows: 5, Cols: 20}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := term.PID()
	term.Close()
	waitReaped(t, pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := c.Terminals(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal still listed after it expired: %+v", list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReaped waits until pid has exited and been reaped.
func waitReaped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTerminalBadInput(t *testing.T) {
	c := startAgent(t).connect(t)
	size := TermSize{Rows: 24, Cols: 80}
	tests := []struct {
		name string
		req  TermRequest
		want error
	}{
		{"zero size", TermRequest{Argv: []string{"sh"}}, errdefs.ErrInvalidArgument},
		{"huge size", TermRequest{Argv: []string{"sh"}, Size: TermSize{Rows: 5000, Cols: 80}}, errdefs.ErrInvalidArgument},
		{"unknown user", TermRequest{User: "no-such-user-zeish", Size: size}, errdefs.ErrInvalidArgument},
		{"missing binary", TermRequest{Argv: []string{"no-such-binary-zeish"}, Size: size}, errdefs.ErrFileNotFound},
		{"relative cwd", TermRequest{Argv: []string{"sh"}, Cwd: "tmp", Size: size}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Straight to the agent, past the client's own checks.
			cl, err := c.start(ctxT(t, 5*time.Second), request{Op: opTerm, Term: &tt.req})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.close()
			if _, _, err := cl.next(); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := c.Terminal(ctxT(t, 5*time.Second), TermRequest{Argv: []string{"sh"}}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("client let a 0x0 terminal through: %v", err)
	}
	if _, err := c.AttachTerminal(ctxT(t, 5*time.Second), 999999, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("attach to an unknown pid: %v", err)
	}
	// A bad resize on a live terminal is refused and the terminal goes on.
	out := newScreen()
	term := shell(t, c, out)
	if err := term.Resize(TermSize{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("resize 0x0: %v", err)
	}
	term.cl.w.json(chunkResize, TermSize{}) // past the client's check
	term.Write([]byte("stty size\n"))
	out.waitFor(t, "24 80")
}

func TestTerminalUser(t *testing.T) {
	if os.Getuid() != 0 {
		testskip.Skip(t, "needs root to switch users")
	}
	dir := t.TempDir()
	passwd := dir + "/passwd"
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), 0o644)
	old := passwdFile
	passwdFile = passwd
	t.Cleanup(func() { passwdFile = old })

	c := startAgent(t).connect(t)
	out := newScreen()
	term, err := c.Terminal(ctxT(t, 10*time.Second), TermRequest{User: "nobody", Size: TermSize{Rows: 24, Cols: 80}}, out)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	term.Write([]byte("echo id=$(id -u):$(id -g) home=$HOME user=$USER cwd=$(pwd); exit\n"))
	out.waitFor(t, "id=65534:65534 home=/nonexistent user=nobody cwd=/\r\n")
	if res := result(t, term); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
}

func TestTerminalLimit(t *testing.T) {
	c := startAgent(t).connect(t)
	size := TermSize{Rows: 5, Cols: 20}
	var terms []*Terminal
	for range MaxTerminals {
		term, err := c.Terminal(ctxT(t, 10*time.Second), TermRequest{Argv: []string{"sleep", "100"}, Size: size}, nil)
		if err != nil {
			t.Fatal(err)
		}
		terms = append(terms, term)
	}
	if _, err := c.Terminal(ctxT(t, 10*time.Second), TermRequest{Argv: []string{"sleep", "100"}, Size: size}, nil); !errors.Is(err, errdefs.ErrLimitReached) {
		t.Fatalf("terminal %d: %v, want limit_reached", MaxTerminals+1, err)
	}
	for _, term := range terms {
		term.Signal("KILL")
		result(t, term)
	}
	// Collected: there is room again.
	term, err := c.Terminal(ctxT(t, 10*time.Second), TermRequest{Argv: []string{"true"}, Size: size}, nil)
	if err != nil {
		t.Fatal(err)
	}
	result(t, term)
}
