package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// run execs argv in the sandbox and returns stdout, stderr and the result.
func run(t *testing.T, conn *zeish.SandboxConn, argv ...string) (string, string, guest.ExecResult) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	res, err := conn.Exec(ctxFor(t, 2*time.Minute), api.ExecRequest{Argv: argv}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	return stdout.String(), stderr.String(), res
}

// TestSandbox boots one real VM and proves the foundation on it: exec, files,
// a zeishd restart, and a delete that leaves nothing behind.
func TestSandbox(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 10*time.Minute)
	c := s.client

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "e2e-main", MemoryMiB: 256, Env: map[string]string{"GREETING": "hello"}}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != sandbox.StateRunning {
		t.Fatalf("state after create --wait = %s (%s), want running", sb.State, sb.StateReason)
	}
	// The accelerator is zeishd's verdict (a probe, not a device that opens).
	health, err := c.Health(ctx)
	if err != nil || health.AccelReason == "" {
		t.Fatalf("health: %+v %v", health, err)
	}
	if sb.Accel != health.Accel || sb.Hostname != "e2e-main" || sb.Address == "" || sb.Host == "" || sb.Template != "base" {
		t.Fatalf("sandbox fields: %+v", sb)
	}
	conn, err := c.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}

	dataPlaneSuite(ctx, t, conn, "e2e-main")

	// A background process started now must survive the zeishd restart.
	if _, _, res := run(t, conn, "sh", "-c", "sh -c 'while true; do date +%s > /root/tick; sleep 1; done' </dev/null >/dev/null 2>&1 &"); res.ExitCode != 0 {
		t.Fatalf("start ticker: %+v", res)
	}

	t.Run("zeishd restart keeps the sandbox", func(t *testing.T) {
		pids := procscan.Under(s.dataDir)
		s.stop()
		if len(pids) == 0 || len(procscan.Under(s.dataDir)) != len(pids) {
			t.Fatalf("VM processes before %v, after SIGTERM %v: want unchanged", pids, procscan.Under(s.dataDir))
		}
		s.start()
		got, err := c.WaitSandbox(ctx, sb.ID, api.WaitRequest{State: sandbox.StateRunning, TimeoutSeconds: 120})
		if err != nil || got.State != sandbox.StateRunning {
			t.Fatalf("after restart: %+v, %v", got, err)
		}
		conn, err = c.Connect(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		before, _, _ := run(t, conn, "cat", "/root/tick")
		time.Sleep(2500 * time.Millisecond)
		after, _, _ := run(t, conn, "cat", "/root/tick")
		if before == after {
			t.Fatalf("the background ticker stopped across the restart (%q)", before)
		}
		if _, _, res := run(t, conn, "test", "-f", "/root/blob.bin"); res.ExitCode != 0 {
			t.Fatal("a file written before the restart is gone")
		}
	})

	t.Run("delete leaves nothing", func(t *testing.T) {
		got, err := c.DeleteSandbox(ctx, sb.ID, zeish.Wait())
		if err != nil || got.State != sandbox.StateDestroyed || got.DestroyedAt == nil {
			t.Fatalf("delete: %+v, %v", got, err)
		}
		if p := procscan.Under(s.dataDir); len(p) != 0 {
			t.Fatalf("VM processes left: %v", p)
		}
		if s.remember(); len(s.shmFiles()) != 0 {
			t.Fatalf("RAM files left: %v", s.shmFiles())
		}
		if _, err := os.Stat(filepath.Join(s.dataDir, "sandboxes", sb.ID)); !os.IsNotExist(err) {
			t.Fatalf("sandbox folder left: %v", err)
		}
		got, err = c.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != sandbox.StateDestroyed {
			t.Fatalf("destroyed sandbox should stay readable: %+v, %v", got, err)
		}
		if _, err := conn.Stat(ctx, "/"); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Fatalf("data plane after delete: %v, want unauthenticated", err)
		}
	})
}

// dataPlaneSuite runs the SDK's data-plane calls against a running sandbox
// named hostname whose env holds GREETING=hello: the same checks for a
// single zeishd (TestSandbox) and for a cluster, where the data plane is the
// sandbox's node agent (TestCluster).
func dataPlaneSuite(ctx context.Context, t *testing.T, conn *zeish.SandboxConn, hostname string) {
	t.Run("guest kernel", func(t *testing.T) {
		out, _, _ := run(t, conn, "uname", "-r")
		want := testenv.BaseTemplate(t).KernelRelease
		if strings.TrimSpace(out) != want {
			t.Fatalf("uname -r = %q, want the guest kernel %q", out, want)
		}
		host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		if strings.TrimSpace(out) == strings.TrimSpace(string(host)) {
			t.Logf("note: host and guest run the same kernel release %s", want)
		}
		out, _, _ = run(t, conn, "hostname")
		if strings.TrimSpace(out) != hostname {
			t.Fatalf("hostname = %q", out)
		}
	})

	t.Run("exit codes and streams", func(t *testing.T) {
		cases := []struct {
			argv           []string
			stdout, stderr string
			code           int
		}{
			{[]string{"true"}, "", "", 0},
			{[]string{"false"}, "", "", 1},
			{[]string{"sh", "-c", "exit 42"}, "", "", 42},
			{[]string{"sh", "-c", "echo out; echo err >&2"}, "out\n", "err\n", 0},
			{[]string{"sh", "-c", "echo $GREETING"}, "hello\n", "", 0},
		}
		for _, tc := range cases {
			out, errOut, res := run(t, conn, tc.argv...)
			if out != tc.stdout || errOut != tc.stderr || res.ExitCode != tc.code {
				t.Errorf("%v: stdout %q stderr %q code %d; want %q %q %d", tc.argv, out, errOut, res.ExitCode, tc.stdout, tc.stderr, tc.code)
			}
		}
	})

	t.Run("stdin env cwd", func(t *testing.T) {
		var out bytes.Buffer
		res, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"sh", "-c", "cat; echo $X; pwd"}, Stdin: []byte("in\n"),
			Env: map[string]string{"X": "y"}, Cwd: "/tmp"}, &out, io.Discard)
		if err != nil || res.ExitCode != 0 || out.String() != "in\ny\n/tmp\n" {
			t.Fatalf("got %q, %+v, %v", out.String(), res, err)
		}
	})

	t.Run("timeout kills", func(t *testing.T) {
		start := time.Now()
		res, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"sleep", "60"}, TimeoutSeconds: 1}, io.Discard, io.Discard)
		if err != nil || !res.TimedOut || res.ExitCode == 0 {
			t.Fatalf("got %+v, %v; want timed_out", res, err)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("timeout took %s", time.Since(start))
		}
		out, _, _ := run(t, conn, "sh", "-c", "ps | grep -c '[s]leep 60' || true")
		if strings.TrimSpace(out) != "0" {
			t.Fatalf("sleep still running after timeout: %q", out)
		}
	})

	t.Run("ten concurrent execs", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out bytes.Buffer
				res, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("sleep 0.5; echo %d", i)}}, &out, io.Discard)
				if err == nil && (res.ExitCode != 0 || out.String() != fmt.Sprintf("%d\n", i)) {
					err = fmt.Errorf("exec %d: %q %+v", i, out.String(), res)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("3 MB binary file round trip", func(t *testing.T) {
		data := make([]byte, 3<<20+17)
		rand.Read(data)
		sum := sha256.Sum256(data)
		if _, err := conn.WriteFile(ctx, "/root/blob.bin", bytes.NewReader(data), 0o600); err != nil {
			t.Fatal(err)
		}
		out, _, _ := run(t, conn, "sha256sum", "/root/blob.bin")
		if got := strings.Fields(out); len(got) == 0 || got[0] != hex.EncodeToString(sum[:]) {
			t.Fatalf("sha256 in the guest = %q, want %x", out, sum)
		}
		rc, err := conn.ReadFile(ctx, "/root/blob.bin")
		if err != nil {
			t.Fatal(err)
		}
		back, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("read back %d bytes (err %v), want %d identical", len(back), err, len(data))
		}
	})

	t.Run("files", func(t *testing.T) {
		if _, err := conn.Mkdir(ctx, "/root/d/e", true); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteFile(ctx, "/root/d/e/f.txt", strings.NewReader("hi"), 0o644); err != nil {
			t.Fatal(err)
		}
		list, err := conn.ListFiles(ctx, "/root/d/e")
		if err != nil || len(list) != 1 || list[0].Name != "f.txt" || list[0].Size != 2 {
			t.Fatalf("list = %+v, %v", list, err)
		}
		st, err := conn.Stat(ctx, "/root/d")
		if err != nil || !st.IsDir {
			t.Fatalf("stat = %+v, %v", st, err)
		}
		if _, err := conn.Stat(ctx, "/root/nope"); !errors.Is(err, errdefs.ErrFileNotFound) {
			t.Fatalf("stat missing: %v, want file_not_found", err)
		}
		if err := conn.Remove(ctx, "/root/d", true); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Stat(ctx, "/root/d"); !errors.Is(err, errdefs.ErrFileNotFound) {
			t.Fatalf("after remove: %v", err)
		}
	})
}
