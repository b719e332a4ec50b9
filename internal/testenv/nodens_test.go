package testenv

import (
	"bufio"
	"net"
	"strings"
	"testing"
)

// TestNodeNetns: the namespace has lo alone; a host service forwarded in
// answers at its own address inside, and not while it is cut.
func TestNodeNetns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()
	n := NewNodeNetns(t, ln.Addr().String())
	if links, err := n.Links(); err != nil || strings.Count(strings.TrimSpace(links), "\n") != 0 || !strings.Contains(links, ": lo:") {
		t.Fatalf("links: %v\n%s", err, links)
	}
	read := func() (string, error) {
		c, err := DialIn(n.Name, "tcp", ln.Addr().String())
		if err != nil {
			return "", err
		}
		defer c.Close()
		return bufio.NewReader(c).ReadString('\n')
	}
	if got, err := read(); got != "hello from the host\n" {
		t.Fatalf("through the forward: %q %v", got, err)
	}
	if err := n.Cut(ln.Addr().String(), true); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(); got != "" {
		t.Fatalf("a cut forward answered %q", got)
	}
	n.Cut(ln.Addr().String(), false)
	if got, err := read(); got != "hello from the host\n" {
		t.Fatalf("joined again: %q %v", got, err)
	}
	// Nothing else of the host is reachable from inside.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if c, err := DialIn(n.Name, "tcp", other.Addr().String()); err == nil {
		c.Close()
		t.Fatalf("the namespace reached %s, which was not forwarded", other.Addr())
	}
}
