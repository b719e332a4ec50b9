package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestLoad holds 200 concurrent API clients and 32 concurrent exec streams
// (a sandbox's whole data-plane allowance) against one node, plus slowloris
// connections: every call must succeed, every stream must deliver all of
// its output, one call past the allowance gets 429 too_many_requests, and
// every slowloris connection must be cut. zeishd's RSS is reported, not
// asserted (bench/ is for numbers).
func TestLoad(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 10*time.Minute)
	c := s.client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "load", MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	conn := connect(t, c, sb.ID)
	status := s.procStatus
	rss := func() string { return status("VmRSS") }
	hwm := func() string { return status("VmHWM") }
	t.Logf("zeishd before load: %s, %s", rss(), hwm())

	// Slowloris: connections that never finish their headers.
	const slow = 50
	var slowConns []net.Conn
	for i := 0; i < slow; i++ {
		nc, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		slowConns = append(slowConns, nc)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	stop := time.Now().Add(20 * time.Second)
	var calls sync.Map
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl := zeish.NewClient(s.url(), s.key)
			n := 0
			for time.Now().Before(stop) {
				if _, err := cl.GetSandbox(ctx, sb.ID); err != nil {
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
				n++
			}
			calls.Store(i, n)
		}(i)
	}
	const streams, lines = 32, 2000
	release := make(chan struct{})
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-release
			var out strings.Builder
			script := fmt.Sprintf("sleep 2; i=0; while [ $i -lt %d ]; do echo line-%d-$i; i=$((i+1)); done", lines, i)
			res, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"sh", "-c", script}}, &out, io.Discard)
			if err != nil || res.ExitCode != 0 {
				errs <- fmt.Errorf("stream %d: exit %d, %v", i, res.ExitCode, err)
				return
			}
			if got := strings.Count(out.String(), "\n"); got != lines || !strings.Contains(out.String(), fmt.Sprintf("line-%d-%d\n", i, lines-1)) {
				errs <- fmt.Errorf("stream %d: %d lines, want %d", i, got, lines)
			}
		}(i)
	}
	close(release)
	// While the 32 streams sleep, one call more is refused at once.
	time.Sleep(time.Second)
	var over strings.Builder
	if _, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"true"}}, &over, &over); err == nil || !strings.Contains(err.Error(), "too_many_requests") {
		t.Errorf("exec past the allowance of 32: %v, want too_many_requests", err)
	}
	t.Logf("zeishd under load: %s, %s", rss(), hwm())
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	calls.Range(func(_, v any) bool { total += v.(int); return true })
	t.Logf("200 clients made %d API calls in 20 s; zeishd after: %s, %s", total, rss(), hwm())

	for i, nc := range slowConns {
		nc.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Errorf("slowloris connection %d not cut: %v", i, err)
		}
	}
	resp, err := http.Get("http://" + s.addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after load: %v", err)
	}
	resp.Body.Close()
}
