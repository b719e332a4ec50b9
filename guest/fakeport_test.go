//go:build linux

package guest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

// fakePort behaves like QEMU's virtio-serial port with a socket chardev: the
// guest side is one endless byte stream that survives hosts coming and
// going; what the guest writes while no host is attached is dropped; a new
// host can take over without the guest seeing any disconnect (as after a VM
// fork, where the resumed guest talks to a different zeishd).
type fakePort struct {
	inR *io.PipeReader // host → guest, shared by every host
	inW *io.PipeWriter

	mu   sync.Mutex
	host *fakeHost
}

func newFakePort() *fakePort {
	r, w := io.Pipe()
	return &fakePort{inR: r, inW: w}
}

func (p *fakePort) Read(b []byte) (int, error) { return p.inR.Read(b) }

func (p *fakePort) Write(b []byte) (int, error) {
	p.mu.Lock()
	h := p.host
	p.mu.Unlock()
	if h != nil {
		h.outW.Write(b) // fails only if that host is gone: dropped, like QEMU
	}
	return len(b), nil
}

func (p *fakePort) Close() error {
	p.inR.Close()
	p.detach()
	return nil
}

// attach connects a new host, cutting off the previous one.
func (p *fakePort) attach() net.Conn {
	r, w := io.Pipe()
	h := &fakeHost{port: p, outR: r, outW: w, closed: make(chan struct{})}
	p.mu.Lock()
	old := p.host
	p.host = h
	p.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return h
}

// detach disconnects the current host, as when zeishd dies.
func (p *fakePort) detach() {
	p.mu.Lock()
	h := p.host
	p.mu.Unlock()
	if h != nil {
		h.Close()
	}
}

// inject writes raw bytes into the guest's stream.
func (p *fakePort) inject(b []byte) { p.inW.Write(b) }

type fakeHost struct {
	port   *fakePort
	outR   *io.PipeReader // guest → this host
	outW   *io.PipeWriter
	once   sync.Once
	closed chan struct{}
}

func (h *fakeHost) Read(b []byte) (int, error) { return h.outR.Read(b) }

func (h *fakeHost) Write(b []byte) (int, error) {
	select {
	case <-h.closed:
		return 0, net.ErrClosed
	default:
	}
	return h.port.inW.Write(b)
}

func (h *fakeHost) Close() error {
	h.once.Do(func() {
		close(h.closed)
		h.outR.Close()
		h.outW.Close()
		h.port.mu.Lock()
		if h.port.host == h {
			h.port.host = nil
		}
		h.port.mu.Unlock()
	})
	return nil
}

func (h *fakeHost) LocalAddr() net.Addr              { return fakeAddr{} }
func (h *fakeHost) RemoteAddr() net.Addr             { return fakeAddr{} }
func (h *fakeHost) SetDeadline(time.Time) error      { return nil }
func (h *fakeHost) SetReadDeadline(time.Time) error  { return nil }
func (h *fakeHost) SetWriteDeadline(time.Time) error { return nil }
func (fakeAddr) Network() string                     { return "fake" }
func (fakeAddr) String() string                      { return "fake-port" }

type fakeAddr struct{}

// fakeSystem records what Configure asked for instead of changing the host.
type fakeSystem struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeSystem) record(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
	return nil
}

func (f *fakeSystem) system() system {
	return system{
		setTime:     func(t time.Time) error { return f.record("time") },
		addEntropy:  func(b []byte) error { return f.record("entropy") },
		setHostname: func(h string) error { return f.record("hostname=" + h) },
		setNetwork:  func(n Network) error { return f.record("network=" + n.Address) },
	}
}

type testAgent struct {
	port *fakePort
	srv  *Server
	sys  *fakeSystem
}

// startAgent runs a server in-process on a fake port.
func startAgent(t *testing.T) *testAgent {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := &testAgent{port: newFakePort(), srv: NewServer(log, "test"), sys: &fakeSystem{}}
	a.srv.sys = a.sys.system()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		a.srv.ServePort(ctx, a.port)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return a
}

// connect attaches a new host to the agent's port and handshakes.
func (a *testAgent) connect(t *testing.T) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := Connect(ctx, func(context.Context) (net.Conn, error) { return a.port.attach(), nil }, WithLogger(log))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
