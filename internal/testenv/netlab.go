package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/zeish/zeish/internal/testskip"
)

// NetLab is a test's own little internet, so that nothing a test does with
// networking can reach (or change) the machine's real network:
//
//	netns Node ── veth ── netns Inet
//	198.18.0.2/24         198.18.0.1/24  (+ the hosts below, on lo)
//
// Node is where the test runs zeishd (Zeishd.Netns): its only route leads to
// Inet. Inet holds an HTTP server on every one of its hosts (it answers
// "hello from <address>") and a DNS server at DNS with the names in Names.
// All addresses are in 198.18.0.0/15 (LabRange), the benchmarking range,
// which the product blocks by default: a zeishd in the lab opens it with
// ZEISH_NET_ALLOW_RANGES=LabRange.
type NetLab struct {
	Node, Inet string // network namespace names
	Uplink     string // the veth end in Node (ZEISH_NET_UPLINK)
	NodeAddr   string // its address
	DNS        string // "198.18.0.1:53"
	Names      map[string]string
	peer       string // the veth end in Inet

	mu      sync.Mutex
	closers []func() error
	queries []string // names the DNS server was asked, in order
}

// LabRange is the lab's internet, blocked to guests by default: zeishd
// (ZEISH_NET_ALLOW_RANGES) or network.Config.AllowRanges must open it.
const LabRange = "198.18.0.0/15"

// Hosts of the lab's internet, each serving HTTP on port 80.
const (
	LabGateway = "198.18.0.1" // also the DNS server
	LabHostA   = "198.18.5.5" // allowed.test
	LabHostB   = "198.18.6.6" // denied.test
	LabHostC   = "198.18.7.7" // other.test
	// Addresses guests must never reach, though the lab routes them: a
	// private (RFC 1918) host and a cloud metadata service.
	LabPrivate  = "192.168.77.7"
	LabMetadata = "169.254.169.254"
)

var labHosts = []string{LabGateway, LabHostA, LabHostB, LabHostC, LabPrivate, LabMetadata}

// NewNetLab builds the lab; everything it made (namespaces, veths,
// listeners) goes at cleanup, also when the test fails. Needs root.
func NewNetLab(t testing.TB) *NetLab {
	t.Helper()
	if os.Geteuid() != 0 {
		testskip.Skip(t, "network namespaces need root")
	}
	l, err := OpenNetLab()
	if l != nil {
		t.Cleanup(func() {
			if err := l.Close(); err != nil {
				t.Errorf("netlab cleanup: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// OpenNetLab builds the lab outside a test (the bench); the caller Closes
// it, also after an error (then l may be partly made).
func OpenNetLab() (*NetLab, error) {
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	l := &NetLab{
		Node: "zlab-" + id + "-n", Inet: "zlab-" + id + "-i",
		Uplink: "zlv" + id + "n", NodeAddr: "198.18.0.2",
		DNS: LabGateway + ":53",
		Names: map[string]string{
			"allowed.test": LabHostA, "www.allowed.test": LabHostA,
			"denied.test": LabHostB, "other.test": LabHostC,
		},
	}
	peer := "zlv" + id + "i"
	l.peer = peer
	steps := [][]string{
		{"netns", "add", l.Node},
		{"netns", "add", l.Inet},
		{"link", "add", l.Uplink, "netns", l.Node, "type", "veth", "peer", "name", peer, "netns", l.Inet},
		{"-n", l.Node, "link", "set", "lo", "up"},
		{"-n", l.Inet, "link", "set", "lo", "up"},
		{"-n", l.Node, "addr", "add", l.NodeAddr + "/24", "dev", l.Uplink},
		{"-n", l.Inet, "addr", "add", LabGateway + "/24", "dev", peer},
		{"-n", l.Node, "link", "set", l.Uplink, "up"},
		{"-n", l.Inet, "link", "set", peer, "up"},
		{"-n", l.Node, "route", "add", "default", "via", LabGateway},
	}
	for _, h := range labHosts[1:] {
		steps = append(steps, []string{"-n", l.Inet, "addr", "add", h + "/32", "dev", "lo"})
	}
	l.closers = append(l.closers, func() error {
		// Deleting a namespace deletes the veth pair with it.
		return errors.Join(ipCmd("netns", "del", l.Node), ipCmd("netns", "del", l.Inet))
	})
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return l, err
		}
	}
	for _, h := range labHosts {
		ln, err := l.ListenIn(l.Inet, "tcp", h+":80")
		if err != nil {
			return l, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A POST's body is read and counted ("N bytes"), for uploads.
			if r.Method == http.MethodPost {
				n, _ := io.Copy(io.Discard, r.Body)
				fmt.Fprintf(w, "%d bytes\n", n)
				return
			}
			// /bytes/N answers N bytes, for transfers of a known size.
			if n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64); err == nil && n >= 0 && n <= 1<<30 {
				w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
				io.CopyN(w, zeros{}, n)
				return
			}
			fmt.Fprintf(w, "hello from %s\n", h)
		})}
		go srv.Serve(ln)
		l.addCloser(srv.Close)
	}
	pc, err := l.listenPacketIn(l.Inet, "udp", l.DNS)
	if err != nil {
		return l, err
	}
	ds := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(l.serveDNS)}
	go ds.ActivateAndServe()
	l.addCloser(ds.Shutdown)
	return l, nil
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Queries are the names (lower case, no trailing dot) the lab's DNS server
// was asked so far, in order.
func (l *NetLab) Queries() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.queries...)
}

func (l *NetLab) serveDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	if len(q.Question) == 1 {
		name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
		l.mu.Lock()
		l.queries = append(l.queries, name)
		l.mu.Unlock()
		addr, ok := l.Names[name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Question[0].Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.ParseIP(addr),
			})
		}
	}
	w.WriteMsg(m)
}

func (l *NetLab) addCloser(f func() error) {
	l.mu.Lock()
	l.closers = append(l.closers, f)
	l.mu.Unlock()
}

// Close removes everything the lab made, last made first.
func (l *NetLab) Close() error {
	l.mu.Lock()
	cs := l.closers
	l.closers = nil
	l.mu.Unlock()
	var errs []error
	for i := len(cs) - 1; i >= 0; i-- {
		errs = append(errs, cs[i]())
	}
	return errors.Join(errs...)
}

// InNetns runs fn on a thread that is in network namespace name; sockets fn
// opens stay in that namespace after it returns.
func InNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	ns, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: never let Go reuse it.
		runtime.Goexit()
	}
	return ferr
}

// ListenIn listens on addr inside network namespace ns.
func (l *NetLab) ListenIn(ns, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := InNetns(ns, func() (err error) { ln, err = net.Listen(network, addr); return })
	if err == nil {
		l.addCloser(func() error { ln.Close(); return nil })
	}
	return ln, err
}

func (l *NetLab) listenPacketIn(ns, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := InNetns(ns, func() (err error) { pc, err = net.ListenPacket(network, addr); return })
	return pc, err
}

// DialIn connects to addr from inside network namespace ns.
func DialIn(ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := InNetns(ns, func() (err error) { c, err = net.Dial(network, addr); return })
	return c, err
}

// Relay listens on the host's loopback and joins every connection to addr
// inside ns, so code in the host's namespace (a test's HTTP clients, the
// CLI) reaches a server in the lab. It returns the host-side address.
func (l *NetLab) Relay(ns, addr string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	l.addCloser(func() error { ln.Close(); return nil })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := DialIn(ns, "tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				join(c, up)
			}()
		}
	}()
	return ln.Addr().String(), nil
}

// join copies a to b and b to a until both sides have finished writing.
func join(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(b, a); b.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(a, b); a.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// Sealed checks that the lab leads nowhere but into itself: Node and Inet
// have no link but lo and their ends of the lab's veth, Node's way to any
// address outside the lab is the lab's gateway, and Inet has no route to
// one at all. What runs in Node (zeishd, its guests, a bench's QEMU) then
// cannot reach the machine's real network, however it is configured.
func (l *NetLab) Sealed() error {
	for ns, want := range map[string]string{l.Node: l.Uplink, l.Inet: l.peer} {
		out, err := Exec(ns, "ip", "-o", "link", "show")
		if err != nil {
			return fmt.Errorf("links of %s: %v: %s", ns, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if name != "lo" && name != want {
				return fmt.Errorf("lab namespace %s has a link %q besides lo and %s", ns, name, want)
			}
		}
	}
	const outside = "192.0.2.1" // TEST-NET-1: not the lab's, never contacted
	out, err := Exec(l.Node, "ip", "-4", "route", "get", outside)
	if err != nil || !strings.Contains(out, "via "+LabGateway+" dev "+l.Uplink) {
		return fmt.Errorf("lab namespace %s routes %s other than into the lab: %v: %s", l.Node, outside, err, out)
	}
	if out, err := Exec(l.Inet, "ip", "-4", "route", "get", outside); err == nil {
		return fmt.Errorf("lab internet %s has a route out: %s", l.Inet, out)
	}
	return nil
}

// Exec runs a command inside namespace ns (for tests that inspect it: ip, nft).
func Exec(ns string, name string, args ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, name}, args...)...).CombinedOutput()
	return string(out), err
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
