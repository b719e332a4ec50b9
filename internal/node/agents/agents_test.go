package agents

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/vmm"
)

// fakeDriver serves a real guest agent over a pipe per dial, unless the
// guest is dead or not yet answering.
type fakeDriver struct {
	dead    atomic.Bool
	silent  atomic.Bool // dials fail: the guest has not booted
	dials   atomic.Int32
	srv     *guest.Server
	mu      sync.Mutex
	servers []net.Conn
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{srv: guest.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), "test")}
}

func (d *fakeDriver) Alive(*vmm.Handle) bool { return !d.dead.Load() }
func (d *fakeDriver) DialAgent(ctx context.Context, _ *vmm.Handle) (net.Conn, error) {
	d.dials.Add(1)
	if d.dead.Load() || d.silent.Load() {
		return nil, errors.New("no agent yet")
	}
	client, server := net.Pipe()
	d.mu.Lock()
	d.servers = append(d.servers, server)
	d.mu.Unlock()
	go d.srv.ServeConn(context.Background(), server)
	return client, nil
}

func (d *fakeDriver) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.servers {
		c.Close()
	}
}

// TestConnect: a guest that answers is connected; one that dies while
// the boot waits ends the wait at once as unavailable; one that never
// answers times out.
func TestConnect(t *testing.T) {
	tests := []struct {
		name   string
		silent bool
		dies   bool
		want   error
	}{
		{"answers", false, false, nil},
		{"dies while booting", true, true, errdefs.ErrUnavailable},
		{"never answers", true, false, errdefs.ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDriver()
			defer d.close()
			d.silent.Store(tt.silent)
			bound := 2 * time.Second
			c := New(d, bound)
			if tt.dies {
				time.AfterFunc(50*time.Millisecond, func() { d.dead.Store(true) })
			}
			began := time.Now()
			cl, err := c.Connect(context.Background(), &vmm.Handle{})
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("connect: %v, want %v", err, tt.want)
			}
			if cl != nil {
				cl.Close()
			}
			if tt.dies && time.Since(began) >= bound {
				t.Errorf("a dead guest's connect waited the whole bound (%v)", time.Since(began))
			}
		})
	}
}

// TestKeep: concurrent callers share one connection (connect runs once),
// a live connection is never replaced, and a broken one is.
func TestKeep(t *testing.T) {
	d := newFakeDriver()
	defer d.close()
	c := New(d, time.Second)
	var connects atomic.Int32
	connect := func() (*guest.Client, error) {
		connects.Add(1)
		return c.Connect(context.Background(), &vmm.Handle{})
	}
	var wg sync.WaitGroup
	got := make([]*guest.Client, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = c.Keep("sbx_a", connect)
		}()
	}
	wg.Wait()
	for _, cl := range got {
		if cl == nil || cl != got[0] {
			t.Fatalf("callers got different connections: %v", got)
		}
	}
	if n := connects.Load(); n != 1 {
		t.Fatalf("%d connects for 8 concurrent callers, want 1", n)
	}
	got[0].Close() // broken: the next Keep connects again
	if c.Live("sbx_a") != nil {
		t.Fatal("a closed connection still counts as live")
	}
	again, err := c.Keep("sbx_a", connect)
	if err != nil || again == got[0] || connects.Load() != 2 {
		t.Fatalf("after a break: %v, %v, %d connects", again, err, connects.Load())
	}
	c.Drop("sbx_a")
	if c.Live("sbx_a") != nil {
		t.Fatal("a dropped connection is still live")
	}
	select {
	case <-again.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Drop did not close the connection")
	}
}
