package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/zeish/zeish/internal/testskip"
)

// NodeNetns is a network namespace of a cluster node's own: it has only
// lo, so the node agent in it (Zeishd.Netns) reaches nothing but the
// host's loopback services the test forwards into it, at the same
// addresses (the control plane, the image store). The host reaches the
// node's listener through Relay. Cutting a forward (Cut) partitions the
// node from that one service, as a network would.
type NodeNetns struct {
	Name string

	lab      *NetLab // its closers and Relay
	mu       sync.Mutex
	forwards map[string]*forward // by address
}

// forward is one host service reachable inside the namespace.
type forward struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	cut   bool
}

// NewNodeNetns makes the namespace, with lo up and a forward of each of
// addrs (host:port on the host's loopback) at the same address inside;
// everything goes at cleanup, also when the test fails. Needs root.
func NewNodeNetns(t testing.TB, addrs ...string) *NodeNetns {
	t.Helper()
	if os.Geteuid() != 0 {
		testskip.Skip(t, "network namespaces need root")
	}
	b := make([]byte, 3)
	rand.Read(b)
	n := &NodeNetns{Name: "zlab-" + hex.EncodeToString(b) + "-c", lab: &NetLab{}, forwards: map[string]*forward{}}
	t.Cleanup(func() {
		if err := n.lab.Close(); err != nil {
			t.Errorf("node netns cleanup: %v", err)
		}
	})
	if err := ipCmd("netns", "add", n.Name); err != nil {
		t.Fatal(err)
	}
	n.lab.addCloser(func() error { return ipCmd("netns", "del", n.Name) })
	if err := ipCmd("-n", n.Name, "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if err := n.forward(a); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// forward listens on addr inside the namespace and joins every connection
// to addr on the host.
func (n *NodeNetns) forward(addr string) error {
	ln, err := n.lab.ListenIn(n.Name, "tcp", addr)
	if err != nil {
		return fmt.Errorf("forward %s into %s: %w", addr, n.Name, err)
	}
	f := &forward{ln: ln, conns: map[net.Conn]bool{}}
	n.mu.Lock()
	n.forwards[addr] = f
	n.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.relay(c, addr)
		}
	}()
	return nil
}

func (f *forward) relay(c net.Conn, addr string) {
	defer c.Close()
	f.mu.Lock()
	if f.cut {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	up, err := net.Dial("tcp", addr) // this goroutine's thread is in the host's namespace
	if err != nil {
		return
	}
	defer up.Close()
	f.mu.Lock()
	f.conns[c], f.conns[up] = true, true
	f.mu.Unlock()
	join(c, up)
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, up)
	f.mu.Unlock()
}

// Cut partitions the node from the host's service at addr (cut) or joins
// it again: while cut, connections are closed at once and open ones are
// dropped, as when a link goes down.
func (n *NodeNetns) Cut(addr string, cut bool) error {
	n.mu.Lock()
	f := n.forwards[addr]
	n.mu.Unlock()
	if f == nil {
		return errors.New("no forward of " + addr + " into " + n.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
	if cut {
		for c := range f.conns {
			c.Close()
		}
	}
	return nil
}

// Relay is a host loopback address joined to addr inside the namespace
// (the node's listener), for the control plane and the test's clients.
func (n *NodeNetns) Relay(addr string) (string, error) { return n.lab.Relay(n.Name, addr) }

// Links lists the namespace's links: only lo, for a node with nothing but
// the test's forwards.
func (n *NodeNetns) Links() (string, error) { return Exec(n.Name, "ip", "-o", "link", "show") }
