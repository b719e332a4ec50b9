//go:build linux

package guest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestExec(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	if err := c.Configure(ctxT(t, 5*time.Second), Config{Env: map[string]string{"FROM_CONFIG": "cfg", "OVERRIDE": "config"}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		req        ExecRequest
		stdin      string
		wantOut    string
		wantErrOut string
		wantCode   int
		wantSignal string
		timedOut   bool
		wantErr    error
	}{
		{name: "exit 0", req: ExecRequest{Argv: []string{"echo", "hello"}}, wantOut: "hello\n"},
		{name: "exit code", req: ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}, wantCode: 3},
		{name: "stdout and stderr apart", req: ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}},
			wantOut: "out\nout2\n", wantErrOut: "err\n"},
		{name: "stdin", req: ExecRequest{Argv: []string{"cat"}}, stdin: "some input\x00\xff", wantOut: "some input\x00\xff"},
		{name: "no stdin is EOF", req: ExecRequest{Argv: []string{"cat"}}},
		{name: "env layers", req: ExecRequest{Argv: []string{"sh", "-c", "echo $HOME $FROM_CONFIG $OVERRIDE $REQ"},
			Env: map[string]string{"OVERRIDE": "request", "REQ": "r"}}, wantOut: "/root cfg request r\n"},
		{name: "cwd", req: ExecRequest{Argv: []string{"pwd"}, Cwd: "/tmp"}, wantOut: "/tmp\n"},
		{name: "timeout kills the group", req: ExecRequest{Argv: []string{"sh", "-c", "sleep 5 & sleep 5; echo never"}, Timeout: 200 * time.Millisecond},
			wantCode: -1, wantSignal: "SIGKILL", timedOut: true},
		{name: "killed by signal", req: ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, wantCode: -1, wantSignal: "SIGTERM"},
		{name: "not found", req: ExecRequest{Argv: []string{"no-such-binary-zeish"}}, wantErr: errdefs.ErrFileNotFound},
		{name: "not found by path", req: ExecRequest{Argv: []string{"/nope/bin"}}, wantErr: errdefs.ErrFileNotFound},
		{name: "empty argv", req: ExecRequest{}, wantErr: errdefs.ErrInvalidArgument},
		{name: "missing cwd", req: ExecRequest{Argv: []string{"pwd"}, Cwd: "/no/such/dir"}, wantErr: errdefs.ErrFileNotFound},
		{name: "relative cwd", req: ExecRequest{Argv: []string{"pwd"}, Cwd: "tmp"}, wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			var stdin *strings.Reader
			if tt.stdin != "" {
				stdin = strings.NewReader(tt.stdin)
			}
			var res ExecResult
			var err error
			if stdin != nil {
				res, err = c.Exec(ctxT(t, 5*time.Second), tt.req, stdin, &stdout, &stderr)
			} else {
				res, err = c.Exec(ctxT(t, 5*time.Second), tt.req, nil, &stdout, &stderr)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tt.wantCode || res.Signal != tt.wantSignal || res.TimedOut != tt.timedOut {
				t.Errorf("result = %+v, want code %d signal %q timed out %v", res, tt.wantCode, tt.wantSignal, tt.timedOut)
			}
			if stdout.String() != tt.wantOut || stderr.String() != tt.wantErrOut {
				t.Errorf("stdout %q stderr %q, want %q and %q", stdout.String(), stderr.String(), tt.wantOut, tt.wantErrOut)
			}
			if res.PID <= 0 {
				t.Errorf("pid = %d", res.PID)
			}
		})
	}
}

func TestExecConcurrent(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			want := strings.Repeat(string(rune('a'+i)), 50000)
			res, err := c.Exec(ctxT(t, 10*time.Second), ExecRequest{Argv: []string{"sh", "-c", "sleep 0.1; printf %s \"$0\"", want}}, nil, &out, nil)
			switch {
			case err != nil:
				errs <- err
			case res.ExitCode != 0 || out.String() != want:
				errs <- errors.New("exec " + string(rune('a'+i)) + ": wrong output or exit code")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// waitGone polls until no process has token in its argv.
func waitGone(t *testing.T, c *Client, token string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		ps, err := c.Processes(ctxT(t, 2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range ps {
			if strings.Contains(strings.Join(p.Argv, " "), token) {
				found = true
			}
		}
		if !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %q still running", token)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestExecCancelKills(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	tests := []struct {
		name  string
		token string
		stdin func() *bytes.Reader
	}{
		{name: "idle", token: "30.123"},
		// The process never reads stdin, so the agent is stuck feeding it.
		{name: "blocked stdin", token: "30.456", stdin: func() *bytes.Reader { return bytes.NewReader(make([]byte, 4<<20)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			req := ExecRequest{Argv: []string{"sleep", tt.token}}
			var err error
			if tt.stdin != nil {
				_, err = c.Exec(ctx, req, tt.stdin(), nil, nil)
			} else {
				_, err = c.Exec(ctx, req, nil, nil, nil)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errdefs.ErrTimeout) {
				t.Fatalf("err = %v, want a timeout", err)
			}
			waitGone(t, c, tt.token)
		})
	}
}

func TestProcessesAndKill(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	done := make(chan ExecResult, 1)
	go func() {
		res, _ := c.Exec(ctxT(t, 5*time.Second), ExecRequest{Argv: []string{"sleep", "30.789"}}, nil, nil, nil)
		done <- res
	}()
	pid := 0
	for deadline := time.Now().Add(3 * time.Second); pid == 0 && time.Now().Before(deadline); {
		ps, err := c.Processes(ctxT(t, 2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if len(p.Argv) == 2 && p.Argv[1] == "30.789" {
				pid = p.PID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatal("exec not in the process list")
	}
	errCases := []struct {
		pid    int
		signal string
		want   error
	}{
		{pid, "NOPE", errdefs.ErrInvalidArgument},
		{0, "KILL", errdefs.ErrInvalidArgument},
		{1 << 30, "KILL", errdefs.ErrNotFound},
	}
	for _, ec := range errCases {
		if err := c.Kill(ctxT(t, 2*time.Second), ec.pid, ec.signal); !errors.Is(err, ec.want) {
			t.Errorf("Kill(%d, %s) = %v, want %v", ec.pid, ec.signal, err, ec.want)
		}
	}
	if err := c.Kill(ctxT(t, 2*time.Second), pid, "TERM"); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.ExitCode != -1 || res.Signal != "SIGTERM" {
		t.Fatalf("result = %+v, want killed by SIGTERM", res)
	}
}

func TestInfoAndConfigure(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	info, err := c.Info(ctxT(t, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.AgentVersion != "test" || info.KernelRelease == "" || info.BootID == "" || info.UptimeSeconds <= 0 {
		t.Errorf("info = %+v", info)
	}
	cfg := Config{Hostname: "sbx-1", Time: time.Now(), Entropy: []byte{1, 2, 3}, Network: &Network{Address: "10.0.2.15/24"}}
	for range 2 { // idempotent: applied again after every fork and restore
		if err := c.Configure(ctxT(t, 2*time.Second), cfg); err != nil {
			t.Fatal(err)
		}
	}
	want := "time entropy hostname=sbx-1 network=10.0.2.15/24 time entropy hostname=sbx-1 network=10.0.2.15/24"
	if got := strings.Join(a.sys.calls, " "); got != want {
		t.Errorf("system calls = %q, want %q", got, want)
	}
}
