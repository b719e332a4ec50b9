//go:build linux

package guest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// lineWaiter lets a test wait for a process to print something.
type lineWaiter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
	want string
	once sync.Once
}

func (l *lineWaiter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if strings.Contains(l.buf.String(), l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return len(p), nil
}

func checkWorks(t *testing.T, c *Client) {
	t.Helper()
	var out bytes.Buffer
	res, err := c.Exec(ctxT(t, 5*time.Second), ExecRequest{Argv: []string{"echo", "alive"}}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "alive\n" {
		t.Fatalf("exec after reconnect: %+v %q %v", res, out.String(), err)
	}
}

func TestHostDropsMidExec(t *testing.T) {
	a := startAgent(t)
	c1 := a.connect(t)
	marker := filepath.Join(t.TempDir(), "finished")
	started := &lineWaiter{want: "started", seen: make(chan struct{})}
	execErr := make(chan error, 1)
	go func() {
		// Keeps writing after the host is gone: output must be discarded
		// without blocking the process, which must run to its end.
		script := "echo started; i=0; while [ $i -lt 20 ]; do echo tick $i; i=$((i+1)); sleep 0.02; done; touch " + marker
		_, err := c1.Exec(ctxT(t, 5*time.Second), ExecRequest{Argv: []string{"sh", "-c", script}}, nil, started, nil)
		execErr <- err
	}()
	select {
	case <-started.seen:
	case <-time.After(3 * time.Second):
		t.Fatal("exec never started")
	}
	a.port.detach()
	if err := <-execErr; !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("exec on a dropped host: err = %v, want unavailable", err)
	}
	select {
	case <-c1.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed after the connection dropped")
	}

	c2 := a.connect(t)
	checkWorks(t, c2)
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, err := c2.Stat(ctxT(t, time.Second), marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old session's process did not run to its end")
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// After a VM fork the resumed guest is talked to by a new host in the middle
// of the old session's byte stream, without any disconnect.
func TestNewSessionWithoutDisconnect(t *testing.T) {
	a := startAgent(t)
	c1 := a.connect(t)
	ticking := &lineWaiter{want: "tick", seen: make(chan struct{})}
	go c1.Exec(context.Background(), ExecRequest{
		Argv:    []string{"sh", "-c", "while :; do echo tick; sleep 0.01; done"},
		Timeout: 1500 * time.Millisecond, // ends the orphan
	}, nil, ticking, nil)
	<-ticking.seen
	// Mid-stream: a half-written frame of the old host, then the new host.
	a.port.inject(appendFrame(nil, frame{kind: frameData, session: 42, payload: make([]byte, 3000)})[:1000])
	c2 := a.connect(t)
	checkWorks(t, c2)
	if _, err := c2.Info(ctxT(t, 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Many handovers in a row, as with repeated forks.
	for range 3 {
		checkWorks(t, a.connect(t))
	}
}

func TestGarbageBeforeHello(t *testing.T) {
	a := startAgent(t)
	junk := bytes.Repeat([]byte("ZSH\x01garbage\x00\xff"), 500)
	a.port.inject(junk)
	c := a.connect(t)
	checkWorks(t, c)
}

func TestConnectRetriesAndGivesUp(t *testing.T) {
	a := startAgent(t)
	dials := 0
	dial := func(context.Context) (net.Conn, error) {
		dials++
		if dials < 3 {
			return nil, errors.New("socket not there yet")
		}
		return a.port.attach(), nil
	}
	c, err := Connect(ctxT(t, 5*time.Second), dial, WithRetryDelay(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkWorks(t, c)

	// A socket that takes everything and never answers (no agent running).
	silent := func(context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go io.Copy(io.Discard, guest)
		return host, nil
	}
	start := time.Now()
	_, err = Connect(ctxT(t, 300*time.Millisecond), silent)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Connect took %v after its ctx ended", d)
	}
}

// A host whose session the agent dropped (here: another host said HELLO)
// learns it at its next request instead of hanging.
func TestStaleHostIsReset(t *testing.T) {
	a := startAgent(t)
	c := a.connect(t)
	checkWorks(t, c)
	a.port.inject(appendFrame(nil, frame{kind: frameHello, session: 12345, payload: helloPadding}))
	if _, err := c.Info(ctxT(t, 3*time.Second)); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed after the reset")
	}
	checkWorks(t, a.connect(t))
}
