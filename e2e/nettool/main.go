// nettool is the guest side of the network tests: a tiny HTTP client and
// TCP dialer with hard timeouts (busybox's wget and nc in the base template
// misbehave with timeouts), built static and copied into the guest.
//
//	nettool get URL       print the body; exit 1 on any failure
//	nettool dial HOST:PORT  connect; exit 0 if it connects
//	nettool serve PORT     serve HTTP ("hello from the guest") until killed
//	nettool fetch URL      download, discard, print "BYTES SECONDS" (60 s at most)
//	nettool push URL N     POST N bytes, print "N SECONDS" (60 s at most)
//	nettool lookup NAME [SERVER]  resolve NAME (at SERVER host:port, else the
//	                       system's resolver); exit 0 if it has an address
//	nettool page PORT FILE serve FILE as the HTML page at every path, with
//	                       cookies (one in the name of zeish's console
//	                       session), logging each request's Cookie header
//	                       to FILE.cookies
//	nettool silent PORT    accept connections, read them, never answer
//	nettool dnsflood SECONDS [SERVER]  send DNS queries for random names as
//	                       fast as it can for SECONDS (to SERVER host:port,
//	                       else the first nameserver of /etc/resolv.conf),
//	                       print how many it sent
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: nettool get URL | dial HOST:PORT")
		os.Exit(2)
	}
	if os.Args[1] == "serve" {
		mux := http.NewServeMux()
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from the guest %s auth=%q\n", r.URL.RequestURI(), r.Header.Get("Authorization"))
		})
		// /ws echoes every WebSocket message back, prefixed "echo: ".
		mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, b, err := c.Read(r.Context())
				if err != nil {
					return
				}
				if c.Write(r.Context(), typ, append([]byte("echo: "), b...)) != nil {
					return
				}
			}
		})
		err := http.ListenAndServe(":"+os.Args[2], mux)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch os.Args[1] {
	case "page":
		page(os.Args[2], os.Args[3])
	case "silent":
		silent(os.Args[2])
	case "dnsflood":
		dnsFlood(os.Args[2:])
	}
	limit := 4 * time.Second
	if os.Args[1] == "fetch" || os.Args[1] == "push" {
		limit = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "fetch":
		err = fetch(ctx, os.Args[2])
	case "push":
		err = push(ctx, os.Args[2], os.Args[3])
	case "lookup":
		r := net.DefaultResolver
		if len(os.Args) > 3 {
			server := os.Args[3]
			r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, server)
			}}
		}
		var addrs []string
		if addrs, err = r.LookupHost(ctx, os.Args[2]); err == nil {
			fmt.Println(addrs)
		}
	case "get":
		err = get(ctx, os.Args[2])
	case "dial":
		var c net.Conn
		if c, err = (&net.Dialer{}).DialContext(ctx, "tcp", os.Args[2]); err == nil {
			c.Close()
			fmt.Println("connected")
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}

// fetch times a download on the guest's monotonic clock, from the request
// to the last byte.
func fetch(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("%d %.3f\n", n, time.Since(start).Seconds())
	return nil
}

// push times an upload of n zero bytes until the server's answer.
func push(ctx context.Context, url, size string) error {
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil {
		return err
	}
	body := io.LimitReader(zeros{}, n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return err
	}
	req.ContentLength = n
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("push: %s", resp.Status)
	}
	fmt.Printf("%d %.3f\n", n, time.Since(start).Seconds())
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// page is a hostile guest's web page: whatever script FILE holds, and
// cookies aimed at zeish's console.
func page(port, file string) {
	html, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cookies, err := os.OpenFile(file+".cookies", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = http.ListenAndServe(":"+port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(cookies, "%s %s\n", r.URL.Path, r.Header.Get("Cookie"))
		w.Header().Add("Set-Cookie", "zeish_session=from-the-guest; Path=/console")
		w.Header().Add("Set-Cookie", "guest=1; Path=/")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(html)
	}))
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// silent holds every connection it gets and never writes a byte: a guest
// behind a port that wants to hold whoever calls it.
func silent(port string) {
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() { io.Copy(io.Discard, c); c.Close() }()
	}
}

// dnsFlood is a guest flooding its DNS forwarder: queries for names no one
// has (so none is cached), from several sockets, never waiting for an
// answer.
func dnsFlood(args []string) {
	secs, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsflood SECONDS [SERVER]")
		os.Exit(2)
	}
	server := ""
	if len(args) > 1 {
		server = args[1]
	} else if conf, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(string(conf), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
				server = net.JoinHostPort(f[1], "53")
				break
			}
		}
	}
	if server == "" {
		fmt.Fprintln(os.Stderr, "no nameserver")
		os.Exit(1)
	}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("udp", server)
			if err != nil {
				return
			}
			defer c.Close()
			go io.Copy(io.Discard, c) // answers, if any, are not the point
			q := make([]byte, 0, 64)
			for i := 0; time.Now().Before(end); i++ {
				q = append(q[:0], byte(i>>8), byte(i), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0) // id, RD, one question
				for _, label := range []string{fmt.Sprintf("q%d-%d", w, i), "flood", "test"} {
					q = append(q, byte(len(label)))
					q = append(q, label...)
				}
				q = append(q, 0, 0, 1, 0, 1) // root, type A, class IN
				if _, err := c.Write(q); err == nil {
					sent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Println(sent.Load(), "queries in", secs, "s to", server)
	os.Exit(0)
}
