package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/guest"
)

// TestListen serves the agent on a unix socket, as `sandboxd --listen`
// does, and drives it with the host client.
func TestListen(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	done := make(chan error, 1)
	go func() { done <- serveListen(ctx, log, guest.NewServer(log, version), "unix:"+sock) }()
	defer func() {
		cancel()
		<-done
	}()

	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock) // retried until the socket exists
	}
	c, err := guest.Connect(cctx, dial, guest.WithLogger(log), guest.WithRetryDelay(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Info(cctx)
	if err != nil || info.AgentVersion != version {
		t.Fatalf("info = %+v, %v", info, err)
	}
	var out bytes.Buffer
	res, err := c.Exec(cctx, guest.ExecRequest{Argv: []string{"echo", "hi"}}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("exec: %+v %q %v", res, out.String(), err)
	}
}

func TestFindPort(t *testing.T) {
	dir := t.TempDir()
	for dev, name := range map[string]string{"vport0p1": "org.qemu.guest_agent.0", "vport1p1": "agent"} {
		os.MkdirAll(filepath.Join(dir, dev), 0o755)
		os.WriteFile(filepath.Join(dir, dev, "name"), []byte(name+"\n"), 0o644)
	}
	if got, err := findPort(dir, "agent"); err != nil || got != "/dev/vport1p1" {
		t.Fatalf("findPort = %q, %v", got, err)
	}
	if _, err := findPort(dir, "missing"); err == nil {
		t.Fatal("found a port that does not exist")
	}
}
