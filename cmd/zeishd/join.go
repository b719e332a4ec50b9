package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/internal/cluster"
	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
)

// How a node agent joins (README, "Many hosts"): an operator runs
// `zeishd join-token [--node ID]` where the control plane's database is
// reachable and starts the node with ZEISH_JOIN_TOKEN set to what it
// prints. The node trades the token, once, for a credential of its own,
// kept in its data dir (credentialFile); from then on it needs no token.

// credentialFile holds a node agent's credential in its data dir (0600).
const credentialFile = "node.credential"

// isAdminCommand reports whether a first argument is an operator's
// command rather than a role.
func isAdminCommand(arg string) bool { return arg == "join-token" || arg == "revoke-node" }

// adminCommand runs `zeishd join-token` or `zeishd revoke-node` (args[0]).
func adminCommand(ctx context.Context, cfg *config.Config, args []string, out io.Writer) error {
	if args[0] == "join-token" {
		return joinToken(ctx, cfg, args[1:], out)
	}
	return revokeNode(ctx, cfg, args[1:], out)
}

// joinToken makes a join token and prints it (only its hash is stored).
func joinToken(ctx context.Context, cfg *config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("zeishd join-token", flag.ContinueOnError)
	node := fs.String("node", "", "the only node id the token admits; it may replace that node's credential (empty: any node that has not joined)")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token may wait to be used (at most 168h)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	t, text, err := cluster.NewJoinToken(*node, *ttl, time.Now())
	if err != nil {
		return err
	}
	_, nodes, err := clusterStore(ctx, cfg, nil)
	if err != nil {
		return err
	}
	if err := nodes.CreateJoinToken(ctx, t); err != nil {
		return err
	}
	fmt.Fprintln(out, text)
	for_ := "any node that has not joined"
	if t.NodeID != "" {
		for_ = "node " + t.NodeID
	}
	fmt.Fprintf(os.Stderr, "join token %s for %s, once, until %s: start the node with ZEISH_JOIN_TOKEN set to it\n",
		t.ID, for_, t.ExpiresAt.Format(time.RFC3339))
	return nil
}

// revokeNode takes a node's credential away: its calls are refused, so it
// stops heartbeating and is lost after ZEISH_NODE_LOST_AFTER, and only a
// join token made for it lets it (or a host taking its place) join again.
func revokeNode(ctx context.Context, cfg *config.Config, args []string, out io.Writer) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: zeishd revoke-node NODE_ID")
	}
	_, nodes, err := clusterStore(ctx, cfg, nil)
	if err != nil {
		return err
	}
	if _, err := nodes.GetNode(ctx, args[0]); err != nil {
		return err
	}
	if _, err := nodes.UpdateNode(ctx, args[0], func(n *store.NodeRecord) error { n.CredentialHash = ""; return nil }); err != nil {
		return err
	}
	fmt.Fprintf(out, "node %s's credential is revoked\n", args[0])
	return nil
}

// nodeCredential is the node's credential: the one in its data dir, else
// one got now by joining with ZEISH_JOIN_TOKEN.
func nodeCredential(ctx context.Context, log *slog.Logger, cfg *config.Config, ctl *controls, id string) (cred string, fromFile bool, err error) {
	path := filepath.Join(cfg.DataDir, credentialFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		cred = strings.TrimSpace(string(b))
		if !cluster.CredentialOf(cred, id) {
			return "", false, fmt.Errorf("%s holds another node's credential, not %s's (ZEISH_NODE_ID changed?): remove it and join again with a join token made for %s", path, id, id)
		}
		return cred, true, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", false, err
	}
	cred, err = join(ctx, log, cfg, ctl, id)
	return cred, false, err
}

// joinTokenSetting is the join token the node was started with:
// ZEISH_JOIN_TOKEN, else the file ZEISH_JOIN_TOKEN_FILE names (a mounted
// secret with a token per host; missing: none).
func joinTokenSetting(cfg *config.Config) (string, error) {
	if t := cfg.JoinToken; t != "" {
		return t, nil
	}
	path := cfg.JoinTokenFile
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("ZEISH_JOIN_TOKEN_FILE: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// join trades the node's join token for its credential and keeps that in
// the data dir.
func join(ctx context.Context, log *slog.Logger, cfg *config.Config, ctl *controls, id string) (string, error) {
	dataDir := cfg.DataDir
	tok, err := joinTokenSetting(cfg)
	if err != nil {
		return "", err
	}
	if tok == "" {
		return "", fmt.Errorf("node %s has no credential (%s in its data dir): make a join token where the control plane's database is reachable (zeishd join-token --node %s) and start the node with ZEISH_JOIN_TOKEN (or ZEISH_JOIN_TOKEN_FILE) set to it", id, credentialFile, id)
	}
	rep, err := untilAnswered(ctx, log, "join the control plane", func() (*connect.Response[nodev2.JoinReply], error) {
		return ctl.Join(ctx, connect.NewRequest(&nodev2.JoinRequest{JoinToken: tok, NodeId: id}))
	})
	if err != nil {
		return "", err
	}
	cred := rep.Msg.Credential
	if err := datadir.WriteFile(filepath.Join(dataDir, credentialFile), []byte(cred+"\n")); err != nil {
		return "", fmt.Errorf("keep the node's credential: %w", err)
	}
	log.Info("joined the cluster: the credential is in the data dir; ZEISH_JOIN_TOKEN is no longer needed", "node", id)
	return cred, nil
}

// untilAnswered calls f until a control-plane replica answers (it may
// start after the node) or ctx ends; an answer that is an error ends it.
func untilAnswered[T any](ctx context.Context, log *slog.Logger, what string, f func() (T, error)) (T, error) {
	for {
		out, err := f()
		if err == nil || !unreachable(err) {
			if err != nil {
				err = fmt.Errorf("%s: %w", what, nodeapi.FromWire("control", err))
			}
			return out, err
		}
		log.Warn(what+"; retrying", "err", err)
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
