// Package guestports finds the TCP ports a guest listens on, from the
// guest kernel's own tables (/proc/net/tcp and tcp6) read through the
// agent: nothing in the guest needs to know about it.
package guestports

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

// Listener is a guest socket in state LISTEN.
type Listener struct {
	Port int
	// Loopback is true when it listens on 127.0.0.0/8 or ::1 only: the port
	// proxy connects from the guest's side, so it still reaches it.
	Loopback bool
}

// maxTable bounds how much of a table is read: a guest could make it huge.
const maxTable = 4 << 20

// Listening reads the guest's TCP tables and returns its listening ports,
// each once, in order (a port bound on both IPv4 and IPv6 counts once; it is
// Loopback only when every socket on it is).
func Listening(ctx context.Context, c *guest.Client) ([]Listener, error) {
	var all []Listener
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		rc, _, err := c.ReadFile(ctx, path)
		if errdefs.Is(err, errdefs.ClassNotFound) {
			continue // a guest without IPv6 has no tcp6
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(rc, maxTable))
		rc.Close()
		if err != nil {
			return nil, err
		}
		ls, err := Parse(b)
		if err != nil {
			return nil, err
		}
		all = append(all, ls...)
	}
	return merge(all), nil
}

// listenState is TCP_LISTEN in the kernel's tables (hex).
const listenState = "0A"

// Parse reads a /proc/net/tcp or tcp6 table and returns its listeners.
func Parse(table []byte) ([]Listener, error) {
	var out []Listener
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Buffer(make([]byte, 4096), 64<<10)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		if f[3] != listenState {
			continue
		}
		addr, port, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, errors.New("guestports: malformed local address " + f[1])
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil || p == 0 {
			return nil, errors.New("guestports: malformed port " + port)
		}
		out = append(out, Listener{Port: int(p), Loopback: loopback(addr)})
	}
	return out, sc.Err()
}

// loopback says whether a table address (hex, in the kernel's word order)
// is 127.0.0.0/8 or ::1.
func loopback(hex string) bool {
	switch len(hex) {
	case 8: // IPv4, one little-endian word on x86: 0100007F is 127.0.0.1
		return strings.HasSuffix(strings.ToUpper(hex), "7F")
	case 32: // IPv6, four words: ::1 is 00000000000000000000000001000000
		return strings.EqualFold(hex, "00000000000000000000000001000000")
	}
	return false
}

func merge(ls []Listener) []Listener {
	byPort := map[int]bool{} // port → loopback only
	for _, l := range ls {
		lo, seen := byPort[l.Port]
		byPort[l.Port] = l.Loopback && (!seen || lo)
	}
	out := make([]Listener, 0, len(byPort))
	for p, lo := range byPort {
		out = append(out, Listener{Port: p, Loopback: lo})
	}
	slices.SortFunc(out, func(a, b Listener) int { return a.Port - b.Port })
	return out
}
