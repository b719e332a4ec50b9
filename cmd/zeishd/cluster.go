package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/cluster"
	"github.com/zeish/zeish/internal/e2b"
	"github.com/zeish/zeish/internal/metering"
	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/internal/node"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev1"
	"github.com/zeish/zeish/internal/nodeapi/nodev1/nodev1connect"
	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/server"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/version"
	"github.com/zeish/zeish/template"
)

// Roles of a zeishd process (ZEISH_ROLE, or the first argument).
const (
	roleAll     = "all"     // the single binary: API, store and the local node
	roleControl = "control" // a control-plane replica: API and store, sandboxes on node agents
	roleNode    = "node"    // a node agent: runs VMs, registers with the control plane
)

// role is the process's role: `zeishd control|node`, else ZEISH_ROLE, else all.
func role() (string, error) {
	r := env("ZEISH_ROLE", roleAll)
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		r = os.Args[1]
	}
	switch r {
	case roleAll, roleControl, roleNode:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want all, control or node", r)
}

// nodeToken is the shared secret of the control plane and its node agents.
func nodeToken() (nodeapi.Token, error) {
	t := os.Getenv("ZEISH_NODE_TOKEN")
	if len(t) < 16 {
		return "", errors.New("ZEISH_NODE_TOKEN: set the same secret of 16 or more characters on the control plane and every node agent")
	}
	return nodeapi.Token(t), nil
}

// clusterStore is the PostgreSQL database the control plane and the node
// agents share (ZEISH_DATABASE_URL).
func clusterStore(ctx context.Context, box *secrets.Box) (store.Store, store.NodeStore, error) {
	if os.Getenv("ZEISH_DATABASE_URL") == "" {
		return nil, nil, errors.New("ZEISH_DATABASE_URL: a control plane and its node agents share one PostgreSQL database (postgres://…)")
	}
	st, err := openStore(ctx, "", box)
	if err != nil {
		return nil, nil, err
	}
	ns, ok := st.(store.NodeStore)
	if !ok {
		st.Close()
		return nil, nil, fmt.Errorf("%T keeps no nodes", st)
	}
	return st, ns, nil
}

// lostAfter is ZEISH_NODE_LOST_AFTER; nodes heartbeat three times within it.
func lostAfter() (time.Duration, error) {
	d, err := time.ParseDuration(env("ZEISH_NODE_LOST_AFTER", cluster.DefaultLostAfter.String()))
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("ZEISH_NODE_LOST_AFTER=%q: want a duration of 1s or more", os.Getenv("ZEISH_NODE_LOST_AFTER"))
	}
	return d, nil
}

// serve runs h on ln, with the limits of every zeishd role, until ctx ends.
func serve(ctx context.Context, log *slog.Logger, ln net.Listener, h http.Handler) error {
	limits, err := httpLimits()
	if err != nil {
		return err
	}
	hs, ln := server.HTTPServer(ln, h, limits)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down; running sandboxes keep running")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runControl is a control-plane replica: the API on the shared database,
// sandboxes placed on node agents, which register here.
func runControl(ctx context.Context) error {
	log := logger()
	slog.SetDefault(log)
	token, err := nodeToken()
	if err != nil {
		return err
	}
	lost, err := lostAfter()
	if err != nil {
		return err
	}
	dataDir, unlock, err := openDataDir()
	if err != nil {
		return err
	}
	defer unlock()
	// Replicas share these keys: copy secrets.key and token.key of the
	// first into the data dir of every other before it starts.
	box, err := secrets.LoadOrCreate(dataDir)
	if err != nil {
		return err
	}
	secretsKey, err := os.ReadFile(filepath.Join(dataDir, secrets.KeyFile))
	if err != nil {
		return err
	}
	tokenKey, err := server.TokenKey(dataDir)
	if err != nil {
		return err
	}
	st, nodes, err := clusterStore(ctx, box)
	if err != nil {
		return err
	}
	defer st.Close()
	keyPath, err := server.EnsureAdmin(ctx, st, dataDir)
	if err != nil {
		return err
	}
	plan, err := planFromEnv()
	if err != nil {
		return err
	}
	prices, err := metering.PricesFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	router := cluster.NewRouter(cluster.Options{Store: st, Nodes: nodes, Token: token, LostAfter: lost, Logger: log})
	// Templates are resolved here and built on the nodes (the built-in ones).
	cat := catalog.New(st, template.BaseOptions{Logger: log})
	mtr := metrics.New(metrics.Options{Store: st, Nodes: nodeStates(nodes, lost), Logger: log})
	dataPlane, err := dataPlaneLimits()
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{Store: st, Node: router, Cluster: router, Catalog: cat, DataDir: dataDir,
		Version: version.Version, PublicURL: os.Getenv("ZEISH_PUBLIC_URL"), PublicDomain: os.Getenv("ZEISH_PUBLIC_DOMAIN"),
		GuestDomains: guestDomains(), DataPlane: dataPlane, Logger: log, Plan: &plan, Prices: &prices, Metrics: mtr})
	if err != nil {
		return err
	}
	reg := &cluster.Registry{Nodes: nodes, TokenKey: tokenKey, SecretsKey: secretsKey, Every: lost / 3, Logger: log}
	mux := http.NewServeMux()
	mux.Handle(reg.Handler(token))
	apiHandler := srv.Handler()
	mux.Handle("/", apiHandler)
	// E2B's API: its control calls here, its envd calls on the sandbox's
	// node (forwarded when the SDK's E2B_SANDBOX_URL names this replica).
	facade := e2b.New(e2b.Options{API: apiHandler, Backend: srv, Templates: cat, Logger: log,
		Domain: os.Getenv("ZEISH_E2B_DOMAIN"), Envd: router.EnvdHandler()})

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go srv.EnforceBudgets(wctx, 2*time.Second)
	go router.WatchNodes(wctx, max(time.Second, lost/5))

	ln, err := net.Listen("tcp", env("ZEISH_LISTEN", "127.0.0.1:7420"))
	if err != nil {
		return err
	}
	log.Info("zeishd control plane listening", "addr", "http://"+ln.Addr().String(), "data_dir", dataDir,
		"node_lost_after", lost, "admin_key", keyPath, "version", version.Version)
	return serve(ctx, log, ln, facade.Mount(mux))
}

// runNode is a node agent: it registers with the control plane
// (ZEISH_CONTROL_URL), runs the VMs of the sandboxes placed on it, serves
// their data plane itself and heartbeats.
func runNode(ctx context.Context) error {
	log := logger()
	slog.SetDefault(log)
	token, err := nodeToken()
	if err != nil {
		return err
	}
	controlURL := os.Getenv("ZEISH_CONTROL_URL")
	ctl := newControls(controlURL, token)
	if len(ctl.clients) == 0 {
		return errors.New("ZEISH_CONTROL_URL: the control plane's address (http://host:port; replicas comma-separated)")
	}
	labels, err := nodeLabels(os.Getenv("ZEISH_NODE_LABELS"))
	if err != nil {
		return err
	}
	dataDir, unlock, err := openDataDir()
	if err != nil {
		return err
	}
	defer unlock()
	id := os.Getenv("ZEISH_NODE_ID")
	if id == "" {
		if id, err = nodeID(dataDir); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", env("ZEISH_LISTEN", "127.0.0.1:7421"))
	if err != nil {
		return err
	}
	defer ln.Close()
	self := env("ZEISH_NODE_URL", "http://"+ln.Addr().String())
	region := env("ZEISH_REGION", "local")
	// Not healthy until it serves and its first heartbeat tells its
	// capacity: nothing is placed on it before.
	reg := &nodev1.RegisterRequest{Protocol: nodeapi.ProtocolVersion, NodeId: id, Region: region, Labels: labels,
		Url: self, Healthy: false, Version: version.Version}
	keys, err := register(ctx, log, ctl, reg)
	if err != nil {
		return err
	}
	box, err := secrets.New(keys.SecretsKey)
	if err != nil {
		return fmt.Errorf("the control plane's secrets key: %w", err)
	}
	st, _, err := clusterStore(ctx, box)
	if err != nil {
		return err
	}
	defer st.Close()
	loc, err := openLocal(ctx, log, dataDir, st, id, true)
	if err != nil {
		return err
	}
	defer loc.Close()
	// The node's own capacity; sandbox counts are the control plane's.
	mtr := metrics.New(metrics.Options{NodeID: id, Capacity: loc.node.Capacity, Logger: log})
	dataPlane, err := dataPlaneLimits()
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{Store: st, Node: ownSandboxes{loc.node, id}, Catalog: loc.cat, DataDir: dataDir, TokenKey: keys.TokenKey,
		Version: version.Version, PublicURL: self, PublicDomain: os.Getenv("ZEISH_PUBLIC_DOMAIN"), GuestDomains: guestDomains(),
		DataPlane: dataPlane, Logger: log, Metrics: mtr})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(nodeapi.Handler(loc.node, st, token))
	// The data plane of this node's sandboxes, on tokens the control plane
	// signed: exec and file bytes never pass through the control plane.
	h := srv.Handler()
	mux.Handle(api.DataPath+"/", h)
	// The guest-backed public routes the control plane forwards here.
	mux.Handle(nodeapi.ForwardPrefix+"/", http.StripPrefix(nodeapi.ForwardPrefix, srv.ForwardedHandler(token.Check)))
	// E2B's envd for this node's sandboxes, on tokens the control plane signed.
	mux.Handle(e2b.Prefix+"/envd/", e2b.New(e2b.Options{Backend: srv, Templates: loc.cat, Logger: log}).EnvdHandler())
	mux.Handle("GET /healthz", h)
	mux.Handle("GET /metrics", h)

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go loc.node.WatchVMs(wctx, 2*time.Second)
	every := time.Duration(keys.HeartbeatMillis) * time.Millisecond
	go heartbeat(wctx, log, ctl, reg, loc, dataDir, max(every, 200*time.Millisecond))

	caps := loc.driver.Capabilities()
	log.Info("zeishd node agent listening", "addr", self, "node", id, "region", region, "labels", labels, "control", controlURL,
		"accel", caps.Accel, "memory_budget_mib", loc.budget, "data_dir", dataDir, "version", version.Version)
	return serve(ctx, log, ln, mux)
}

// nodeLabels parses ZEISH_NODE_LABELS: k=v,k=v.
func nodeLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("ZEISH_NODE_LABELS: %q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// register announces the node until the control plane answers (it may
// start after the node) or ctx ends.
func register(ctx context.Context, log *slog.Logger, ctl nodev1connect.ControlClient, req *nodev1.RegisterRequest) (*nodev1.RegisterReply, error) {
	for {
		rep, err := ctl.Register(ctx, connect.NewRequest(req))
		if err == nil {
			return rep.Msg, nil
		}
		if code := connect.CodeOf(err); code == connect.CodeInvalidArgument || code == connect.CodeUnauthenticated {
			return nil, fmt.Errorf("register with %s: %w", "the control plane", nodeapi.FromWire("control", err))
		}
		log.Warn("register with the control plane; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// capacityOf is what the node can promise now.
func capacityOf(loc *local, dataDir string) (*nodev1.Capacity, bool) {
	c, err := loc.node.Capacity()
	caps := loc.driver.Capabilities()
	out := &nodev1.Capacity{MemoryBudgetMib: int64(c.BudgetMiB), MemoryCommittedMib: int64(c.CommittedMiB),
		ImageRamMib: int64(c.ImageRAMMiB), Vcpus: int32(runtime.NumCPU()), Accel: string(caps.Accel), Vmm: caps.Name}
	var fs syscall.Statfs_t
	if syscall.Statfs(dataDir, &fs) == nil {
		out.DiskFreeMib = int64(fs.Bavail * uint64(fs.Bsize) >> 20)
	}
	return out, err == nil // a node that cannot read its store is not healthy
}

// heartbeat reports the node alive every interval, registers again when
// the control plane no longer knows it, and rejoins the sandboxes marked
// lost while it was away.
func heartbeat(ctx context.Context, log *slog.Logger, ctl nodev1connect.ControlClient, reg *nodev1.RegisterRequest, loc *local, dataDir string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	draining := false
	for {
		c, healthy := capacityOf(loc, dataDir)
		rep, err := ctl.Heartbeat(ctx, connect.NewRequest(&nodev1.HeartbeatRequest{NodeId: reg.NodeId, Capacity: c, Healthy: healthy}))
		switch {
		case err == nil:
			if rep.Msg.Draining != draining {
				draining = rep.Msg.Draining
				log.Info("node drain", "draining", draining)
			}
			loc.node.Rejoin(ctx)
		case connect.CodeOf(err) == connect.CodeNotFound:
			reg.Capacity, reg.Healthy = c, healthy
			if _, err := ctl.Register(ctx, connect.NewRequest(reg)); err != nil {
				log.Warn("register again", "err", err)
			}
		case ctx.Err() == nil:
			log.Warn("heartbeat", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ownSandboxes is a node agent's node as its data plane sees it: only the
// sandboxes placed on this node are served here (a token names a sandbox,
// not a node; another node's VM is not this host's to reach).
type ownSandboxes struct {
	*node.Node
	id string
}

func (o ownSandboxes) mine(r *store.SandboxRecord) error {
	if r.Host != o.id {
		return fmt.Errorf("sandbox %s runs on node %s, not on this one (%s): use the URL /access returns: %w", r.ID, r.Host, o.id, errdefs.ErrNotFound)
	}
	return nil
}

func (o ownSandboxes) Agent(ctx context.Context, r *store.SandboxRecord) (*guest.Client, error) {
	if err := o.mine(r); err != nil {
		return nil, err
	}
	return o.Node.Agent(ctx, r)
}

func (o ownSandboxes) PortAddr(r *store.SandboxRecord, port int) (string, error) {
	if err := o.mine(r); err != nil {
		return "", err
	}
	return o.Node.PortAddr(r, port)
}

// nodeStates reads the node registry for the control plane's /metrics.
func nodeStates(nodes store.NodeStore, lostAfter time.Duration) func(context.Context) ([]metrics.NodeState, error) {
	return func(ctx context.Context) ([]metrics.NodeState, error) {
		list, err := nodes.ListNodes(ctx)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		out := make([]metrics.NodeState, 0, len(list))
		for _, n := range list {
			c := n.Capacity
			out = append(out, metrics.NodeState{ID: n.ID, Region: n.Region, VCPUs: c.VCPUs,
				Capacity: metrics.Capacity{BudgetMiB: c.MemoryBudgetMiB, CommittedMiB: c.MemoryCommittedMiB, ImageRAMMiB: c.ImageRAMMiB},
				Healthy:  n.Healthy, Live: cluster.Live(n, now, lostAfter), Draining: n.Draining,
				SecondsSinceBeat: now.Sub(n.HeartbeatAt).Seconds()})
		}
		return out, nil
	}
}
