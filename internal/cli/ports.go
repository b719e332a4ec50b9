package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) portsCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "ports",
		Short: "Reach servers that run in a sandbox: forward a port, open one to the public",
	})
	var public bool
	open := &cobra.Command{
		Use:   "open ID PORT",
		Short: "Show how a guest port is reached; --public lets requests without a token through",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil {
				return usageError{fmt.Errorf("port %q is not a number", args[1])}
			}
			p, err := a.sdk().SetPort(cmd.Context(), args[0], port, public)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(p)
			}
			tw := table(a.out, "Port:", p.Port)
			row(tw, "Public:", p.Public)
			row(tw, "URL:", p.URL)
			if p.Host != "" {
				row(tw, "Host:", p.Host)
			}
			if p.BrowserURL != "" {
				row(tw, "Browser:", p.BrowserURL) // the port's own origin; URL is for programs
			}
			return tw.Flush()
		},
	}
	open.Flags().BoolVar(&public, "public", false, "no token needed (false: take that back)")
	forward := &cobra.Command{
		Use:   "forward ID PORT[:LOCAL]",
		Short: "Forward a local TCP port (default: the same number) to a port of the guest until interrupted",
		Example: "  zeishctl ports forward SBX 8080          # localhost:8080 → the guest's 8080\n" +
			"  zeishctl ports forward SBX 5432:15432    # localhost:15432 → the guest's 5432",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote, local, _ := strings.Cut(args[1], ":")
			if local == "" {
				local = remote
			}
			port, err := strconv.Atoi(remote)
			if err != nil {
				return usageError{fmt.Errorf("port %q is not a number", remote)}
			}
			conn, err := a.sdk().Connect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", local))
			if err != nil {
				return err
			}
			defer ln.Close()
			fmt.Fprintf(a.out, "forwarding %s → %s:%d (Ctrl-C to stop)\n", ln.Addr(), args[0], port)
			go func() { <-cmd.Context().Done(); ln.Close() }()
			for {
				c, err := ln.Accept()
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
				go a.forwardOne(cmd, conn, port, c)
			}
		},
	}
	list := &cobra.Command{
		Use:   "list ID",
		Short: "List the ports the guest listens on and those open to the public, with their URLs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ports, err := a.sdk().Ports(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(zeish.PortList{Ports: ports})
			}
			tw := table(a.out, "PORT", "LISTENING", "PUBLIC", "URL")
			for _, p := range ports {
				listening := fmt.Sprint(p.Listening)
				if p.Loopback {
					listening += " (loopback)"
				}
				row(tw, p.Port.Port, listening, p.Public, p.URL)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(list, open, forward)
	return cmd
}

func (a *app) forwardOne(cmd *cobra.Command, conn *zeish.SandboxConn, port int, c net.Conn) {
	defer c.Close()
	up, err := conn.DialPort(cmd.Context(), port)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "port %d: %s\n", port, termSafe(err.Error()))
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { copyClose(up, c); done <- struct{}{} }()
	go func() { copyClose(c, up); done <- struct{}{} }()
	<-done
}

// copyClose copies src to dst and then closes dst, so the other direction ends too.
func copyClose(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
}
