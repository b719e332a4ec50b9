package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
)

// testLimits are short so the tests run quickly; the tests wait far longer
// than them for the server to act, and assert only what it did.
var testLimits = Limits{ReadHeader: 200 * time.Millisecond, Body: 200 * time.Millisecond,
	Write: 5 * time.Second, Idle: 200 * time.Millisecond, MaxConns: 3}

// serveLimited serves h under l on a loopback port and returns its address.
func serveLimited(t *testing.T, h http.Handler, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, lln := HTTPServer(ln, h, l)
	go hs.Serve(lln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// cutWithin reports whether the server closes conn before the test gives up.
func cutWithin(t *testing.T, conn net.Conn, d time.Duration) bool {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn) // reads a response, if any, then EOF
	return err == nil
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Slow clients are cut: one that never finishes its headers, one that never
// finishes its body, one that idles between requests.
func TestHTTPServerCutsSlowClients(t *testing.T) {
	bodies := make(chan error, 1)
	addr := serveLimited(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if r.Method == http.MethodPost {
			bodies <- err
		}
	}), testLimits)
	cases := []struct{ name, send string }{
		{"slow headers", "POST /api/v1/public/sandboxes HTTP/1.1\r\nHost: x\r\n"},
		{"slow body", "POST /api/v1/public/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"na"},
		{"idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, addr)
			if _, err := io.WriteString(conn, c.send); err != nil {
				t.Fatal(err)
			}
			if !cutWithin(t, conn, 20*time.Second) {
				t.Fatal("the server kept the connection open")
			}
		})
	}
	if err := <-bodies; err == nil {
		t.Fatal("the handler read a whole body the client never sent")
	}
}

// A stream outlives the body and write deadlines, and so does a long wait
// whose small body was read at once (net/http would cancel its context on
// the body deadline if it stayed on the connection).
func TestHTTPServerSparesStreamsAndWaits(t *testing.T) {
	addr := serveLimited(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-time.After(5 * testLimits.Body):
			io.WriteString(w, "done")
		case <-r.Context().Done():
			w.WriteHeader(499)
		}
	}), Limits{ReadHeader: time.Second, Body: 200 * time.Millisecond, Write: 200 * time.Millisecond, Idle: time.Second,
		Streams: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/e2b/envd/") }})
	for _, path := range []string{api.DataPath + "/sandboxes/sbx_x/exec", api.BasePath + "/public/sandboxes/sbx_x/events", "/e2b/envd/files"} {
		method := http.MethodPost
		if strings.HasSuffix(path, "/events") {
			method = http.MethodGet
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"argv":["sleep"]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "done" {
			t.Fatalf("%s: %d %q, want the stream to finish", path, resp.StatusCode, b)
		}
	}
	// A wait: small body, long answer, within the write deadline.
	addr = serveLimited(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-time.After(5 * testLimits.Body):
			io.WriteString(w, "done")
		case <-r.Context().Done():
		}
	}), Limits{ReadHeader: time.Second, Body: 200 * time.Millisecond, Write: time.Minute, Idle: time.Second})
	resp, err := http.Post("http://"+addr+api.BasePath+"/public/sandboxes/sbx_x/wait", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "done" {
		t.Fatalf("wait: %d %q; the body deadline must not cancel it", resp.StatusCode, b)
	}
}

// Past MaxConns, a new connection is not served until one closes.
func TestHTTPServerCapsConnections(t *testing.T) {
	l := testLimits
	l.Idle, l.ReadHeader = time.Minute, time.Minute
	addr := serveLimited(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), l)
	get := func(conn net.Conn) error {
		conn.SetDeadline(time.Now().Add(time.Second))
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var held []net.Conn
	for i := 0; i < l.MaxConns; i++ {
		c := dial(t, addr)
		if err := get(c); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	extra := dial(t, addr) // the kernel accepts it; the server must not serve it
	if err := get(extra); err == nil {
		t.Fatalf("connection %d was served past the cap of %d", l.MaxConns+1, l.MaxConns)
	}
	// Once one closes, the waiting one is served: its request is answered.
	held[0].Close()
	extra.SetDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err == nil {
		resp.Body.Close()
		return
	}
	t.Fatalf("the waiting connection was not served after one of the %d closed: %v", l.MaxConns, err)
}

// A stream is cut when it stalls: a client that stops reading its output
// or stops sending its body for StreamIdle. One that is merely quiet (a
// command with nothing to say for a while) lives on.
func TestHTTPServerCutsStalledStreams(t *testing.T) {
	l := Limits{ReadHeader: time.Second, Body: time.Second, Write: time.Minute, Idle: time.Minute, StreamIdle: 300 * time.Millisecond}
	ended := make(chan error, 1)
	addr := serveLimited(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.DataPath + "/sandboxes/sbx_x/files": // a download nobody reads
			chunk := make([]byte, 64<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					ended <- err
					return
				}
			}
		case api.DataPath + "/sandboxes/sbx_x/exec": // an upload that stops
			_, err := io.ReadAll(r.Body)
			ended <- err
		default: // a quiet command
			time.Sleep(3 * l.StreamIdle)
			io.WriteString(w, "done")
		}
	}), l)
	for _, c := range []struct{ name, send string }{
		{"client stops reading", "GET " + api.DataPath + "/sandboxes/sbx_x/files HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"client stops sending", "POST " + api.DataPath + "/sandboxes/sbx_x/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"ar"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, addr)
			if _, err := io.WriteString(conn, c.send); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-ended:
				if err == nil {
					t.Fatal("the stream ended without an error")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the stalled stream was kept")
			}
		})
	}
	resp, err := http.Get("http://" + addr + api.DataPath + "/sandboxes/sbx_x/processes")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "done" {
		t.Fatalf("a quiet stream: %d %q, want it to finish", resp.StatusCode, b)
	}
}
