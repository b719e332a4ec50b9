// Command sandboxd is the agent inside every zeish guest. In the VM it is
// /sbin/init: as PID 1 it sets up the machine, runs the agent as a child
// and reaps orphans. Outside a VM it serves a given port or socket, for
// development and tests. Build it static: CGO_ENABLED=0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/zeish/zeish/guest"
)

// version is set at build time: -ldflags "-X main.version=…".
var version = "dev"

const portName = "agent" // the virtserialport name=… on QEMU's command line

func main() {
	if os.Getpid() == 1 {
		runInit() // never returns: PID 1 exiting panics the kernel
	}
	if len(os.Args) > 1 && os.Args[1] == "git-credential" {
		// git's credential helper (see guest/gitcred.go), run by git as the
		// clone's user.
		os.Exit(guest.RunGitCredential(os.Args[2:], os.Stdin, os.Stdout))
	}
	var (
		showVersion = flag.Bool("version", false, "print the version and exit")
		agent       = flag.Bool("agent", false, "serve the virtio-serial port named "+portName+" (what PID 1 runs)")
		port        = flag.String("port", "", "serve this port file or char device")
		listen      = flag.String("listen", "", "serve connections on unix:PATH (development)")
	)
	flag.Parse()
	if *showVersion {
		fmt.Println("sandboxd", version)
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "sandboxd")
	if *agent {
		log = agentLogger()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := guest.NewServer(log, version)

	var err error
	switch {
	case *agent:
		err = serveAgentPort(ctx, log, srv)
	case *port != "":
		err = servePort(ctx, log, srv, *port)
	case *listen != "":
		err = serveListen(ctx, log, srv, *listen)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("agent stopped", "err", err)
		os.Exit(1)
	}
}

func servePort(ctx context.Context, log *slog.Logger, srv *guest.Server, path string) error {
	f, err := openPort(path)
	if err != nil {
		return err
	}
	log.Info("serving port", "path", path, "version", version)
	// A blocking read on the port cannot be interrupted, so on shutdown the
	// server is left to the process exit instead of waited for.
	errc := make(chan error, 1)
	go func() { errc <- srv.ServePort(ctx, f) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func serveListen(ctx context.Context, log *slog.Logger, srv *guest.Server, addr string) error {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return fmt.Errorf("--listen %q: only unix:PATH is supported", addr)
	}
	os.Remove(path) // a stale socket from an earlier run
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	log.Info("listening", "path", path, "version", version)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		go func() {
			if err := srv.ServeConn(ctx, conn); err != nil && ctx.Err() == nil {
				log.Info("connection ended", "err", err)
			}
		}()
	}
}

// agentLogger logs everything to /run/sandboxd.log and only warnings and
// errors to stderr, the serial console: under TCG every line written to the
// emulated UART costs milliseconds, and the agent logs on every boot, fork
// and restore, while they are in progress.
func agentLogger() *slog.Logger {
	console := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	f, err := os.OpenFile("/run/sandboxd.log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return slog.New(console).With("component", "sandboxd")
	}
	return slog.New(teeHandler{slog.NewTextHandler(f, nil), console}).With("component", "sandboxd")
}

// teeHandler sends each record to every handler that takes its level.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			h.Handle(ctx, r.Clone())
		}
	}
	return nil
}

func (t teeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(attrs)
	}
	return out
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
}
