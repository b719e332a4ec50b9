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
//	nettool dnsflood SECONDS [QPS]  send A queries for random names over UDP
//	                       to port 53 (any server: zeishd redirects it) as fast
//	                       as it can (or QPS a second) for SECONDS; print
//	                       "sent N answered N refused N"
//	nettool dnslatency NAME N  resolve NAME N times, one after the other (2 s
//	                       each at most); print "ok N p50_ms X p90_ms X max_ms X"
//	nettool page PORT FILE serve FILE as the HTML page at every path, with
//	                       a cookie (at …/toss one in the name of zeish's
//	                       console session too), logging each request's
//	                       Cookie header to FILE.cookies (page.go)
//	nettool silent PORT    accept connections, read them, never answer
//
// dnsflood is the hostile guest of the DNS tests and load tests: run it in
// one guest and dnslatency in another to see what a neighbour's flood costs.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
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
	case "dnsflood":
		exit(dnsFlood(os.Args[2:]))
	case "dnslatency":
		exit(dnsLatency(os.Args[2:]))
	case "page":
		exit(page(os.Args[2], os.Args[3]))
	case "silent":
		exit(silent(os.Args[2]))
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

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
