//go:build linux

package main

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"github.com/zeish/zeish/guest"
)

// connectInProcess runs the real guest agent server in this process on one
// end of a pipe and returns a host client on the other: the guest protocol
// (framing, session handshake, yamux, JSON) without a VM or virtio-serial.
func connectInProcess(b *testing.B) *guest.Client {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	srv := guest.NewServer(slog.New(slog.DiscardHandler), "bench")
	dial := func(context.Context) (net.Conn, error) {
		host, agent := net.Pipe()
		go srv.ServeConn(ctx, agent)
		return host, nil
	}
	c, err := guest.Connect(ctx, dial, guest.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkGuestInfo is one request/response round trip of the protocol.
func BenchmarkGuestInfo(b *testing.B) {
	c := connectInProcess(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Info(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGuestExecTrue is an exec of `true` end to end over the protocol;
// the process runs on this host, so it includes a fork+exec here.
func BenchmarkGuestExecTrue(b *testing.B) {
	c := connectInProcess(b)
	ctx := context.Background()
	for b.Loop() {
		res, err := c.Exec(ctx, guest.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("exit %d", res.ExitCode)
		}
	}
}

// BenchmarkGuestConnect is the session handshake a host does on every
// (re)attach to an agent.
func BenchmarkGuestConnect(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := guest.NewServer(slog.New(slog.DiscardHandler), "bench")
	quiet := guest.WithLogger(slog.New(slog.DiscardHandler))
	for b.Loop() {
		c, err := guest.Connect(ctx, func(context.Context) (net.Conn, error) {
			host, agent := net.Pipe()
			go srv.ServeConn(ctx, agent)
			return host, nil
		}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
