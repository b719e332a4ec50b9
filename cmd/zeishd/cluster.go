package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/cluster"
	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/e2b"
	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/internal/node"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodestore"
	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/server"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/version"
	"github.com/zeish/zeish/template"
)

// clusterStore is the PostgreSQL database of a cluster
// (ZEISH_DATABASE_URL). box opens sandbox secrets: the control plane's;
// nil on a node agent whose control plane speaks 2.2 (nodeStore), which
// holds no secrets key.
func clusterStore(ctx context.Context, cfg *config.Config, box *secrets.Box) (store.Store, store.NodeStore, error) {
	if cfg.DatabaseURL == "" {
		return nil, nil, errors.New("ZEISH_DATABASE_URL: a control plane's replicas (and node agents of protocol 2.2) share one PostgreSQL database (postgres://…)")
	}
	st, err := openStore(ctx, cfg, box)
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

// serve runs h on ln, with the limits of every zeishd role, until ctx
// ends; over TLS when ZEISH_TLS_CERT is set. streams names the data-plane
// streams beside /data/v1 that h serves (E2B's envd, guest ports by host
// name): the server's deadlines spare them.
func serve(ctx context.Context, log *slog.Logger, cfg *config.Config, ln net.Listener, h http.Handler, tlsConf hostTLS, streams ...func(*http.Request) bool) error {
	limits := server.DefaultLimits
	limits.MaxConns = cfg.MaxConnections
	limits.StreamIdle = cfg.DataIdleTimeout
	limits.Streams = func(r *http.Request) bool {
		for _, s := range streams {
			if s(r) {
				return true
			}
		}
		return false
	}
	hs, ln := server.HTTPServer(ln, h, limits)
	hs.Protocols = tlsConf.serverProtocols()
	errc := make(chan error, 1)
	go func() {
		if tlsConf.serves() {
			errc <- hs.ServeTLS(ln, tlsConf.certFile, tlsConf.keyFile)
			return
		}
		errc <- hs.Serve(ln)
	}()
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
func runControl(ctx context.Context, cfg *config.Config) error {
	log := logger(cfg)
	slog.SetDefault(log)
	hosts, err := loadHostTLS(cfg)
	if err != nil {
		return err
	}
	lost, dataDir := cfg.NodeLostAfter, cfg.DataDir
	unlock, err := openDataDir(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	// Replicas share these keys: copy secrets.key and token.key of the
	// first into the data dir of every other before it starts. Neither
	// leaves the control plane: nodes get keys derived for them alone.
	box, err := secrets.LoadOrCreate(dataDir)
	if err != nil {
		return err
	}
	tokenKey, err := control.TokenKey(dataDir)
	if err != nil {
		return err
	}
	st, nodes, err := clusterStore(ctx, cfg, box)
	if err != nil {
		return err
	}
	defer st.Close()
	keyPath, err := control.EnsureAdmin(ctx, st, dataDir)
	if err != nil {
		return err
	}
	// The image store, if the nodes share one: the API shows what is
	// durable in it, the router refuses at once to move a lost node's
	// image that is not, and one replica at a time sweeps it (the only
	// deleter of its images: nodes drop only their own copies).
	var images control.ImageDurability
	var sweeper control.ImageSweeper
	var storeMetrics []prometheus.Collector
	if remote, err := openImageStore(ctx, log, cfg, ""); err != nil {
		return err
	} else if remote != nil {
		images, sweeper, storeMetrics = remote.Store, remote.Store, remote.Store.Metrics().Collectors()
	}
	router := cluster.NewRouter(cluster.Options{Store: st, Nodes: nodes, Key: tokenKey, Secrets: store.Codec{Secrets: box},
		LostAfter: lost, Logger: log, HTTP: hosts.rpcClient(), Proxy: hosts.proxyTransport(), Images: images})
	// Templates are resolved here and built on the nodes (the built-in ones).
	cat := catalog.New(st, template.BaseOptions{Logger: log})
	mtr := metrics.New(metrics.Options{Store: st, Nodes: nodeStates(nodes, lost), Logger: log, Extra: storeMetrics})
	ctl := control.New(control.Options{Store: st, Node: router, Cluster: router, Catalog: cat, Plan: planOf(cfg), Prices: pricesOf(cfg),
		TokenKey: tokenKey, TokenKeyFor: func(host string) []byte { return cluster.DataPlaneKey(tokenKey, host) },
		Calls: callsOf(cfg), Images: images, Sweeper: sweeper, Metrics: mtr, Logger: log})
	srv := server.New(server.Options{Control: ctl, Proxy: router, Version: version.Version, PublicURL: cfg.PublicURL,
		PublicDomain: cfg.PublicDomain, GuestDomains: guestDomains(cfg), DataPlane: dataPlaneOf(cfg), Logger: log, Metrics: mtr})
	reg := &cluster.Registry{Nodes: nodes, Store: st, Secrets: store.Codec{Secrets: box}, Key: tokenKey, AllowHTTP: hosts.allowHTTP, Every: lost / 3, Logger: log}
	mux := http.NewServeMux()
	mux.Handle(reg.Handler())
	apiHandler := srv.Handler()
	mux.Handle("/", apiHandler)
	// E2B's API: its control calls here, its envd calls on the sandbox's
	// node (forwarded when the SDK's E2B_SANDBOX_URL names this replica).
	facade := e2b.New(e2b.Options{App: ctl, Logger: log, Domain: cfg.E2BDomain, Envd: router.EnvdHandler()})

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go ctl.Enforce(wctx, 2*time.Second)
	go router.WatchNodes(wctx, max(time.Second, lost/5))
	go ctl.SweepImages(wctx, cfg.ImageSweepEvery)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	log.Info("zeishd control plane listening", "addr", hosts.scheme()+"://"+ln.Addr().String(), "data_dir", dataDir,
		"node_lost_after", lost, "admin_key", keyPath, "version", version.Version)
	return serve(ctx, log, cfg, ln, facade.Mount(mux), hosts, facade.IsStream, srv.IsHostPort)
}

// runNode is a node agent: it registers with the control plane
// (ZEISH_CONTROL_URL), runs the VMs of the sandboxes placed on it, serves
// their data plane itself and heartbeats.
func runNode(ctx context.Context, cfg *config.Config) error {
	log := logger(cfg)
	slog.SetDefault(log)
	hosts, err := loadHostTLS(cfg)
	if err != nil {
		return err
	}
	controlURL := strings.Join(cfg.ControlURL, ",")
	controlURLs := urls(controlURL)
	if len(controlURLs) == 0 {
		return errors.New("ZEISH_CONTROL_URL: the control plane's address (https://host:port; replicas comma-separated)")
	}
	for _, u := range controlURLs {
		if err := hosts.checkPeer("ZEISH_CONTROL_URL", u); err != nil {
			return err
		}
	}
	ctl := newControls(controlURLs, hosts.rpcClient())
	dataDir, region, labels := cfg.DataDir, cfg.Region, cfg.NodeLabels
	unlock, err := openDataDir(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	id := cfg.NodeID
	if id == "" {
		if id, err = nodeID(dataDir); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	self := cfg.NodeURL
	if self == "" {
		self = hosts.scheme() + "://" + ln.Addr().String()
	}
	if err := hosts.checkPeer("ZEISH_NODE_URL", self); err != nil {
		return err
	}
	// Wrong image store keys stop the node before it registers (it would
	// be listed and never healthy).
	remote, err := openImageStore(ctx, log, cfg, "/dev/shm")
	if err != nil {
		return err
	}
	// Not healthy until it serves and its first heartbeat tells its
	// capacity: nothing is placed on it before.
	reg := &nodev2.RegisterRequest{Version: nodeapi.Ours(), NodeId: id, Region: region, Labels: labels,
		Url: self, Healthy: false, Build: version.Version}
	callKey := new(nodeapi.CallKey)
	keys, err := joinAndRegister(ctx, log, cfg, ctl, reg)
	if err != nil {
		return err
	}
	callKey.Set(keys.CallKey)
	// No secrets key: the control plane sends the secrets of the sandbox
	// an operation configures, with the operation (nodeapi.Delivered).
	shared, err := nodeStore(ctx, log, cfg, ctl, keys.Version.GetMinor(), dataDir)
	if err != nil {
		return err
	}
	defer shared.Close()
	st := nodeapi.NewDelivered(shared)
	loc, err := openLocal(ctx, log, cfg, st, id, true, remote)
	if err != nil {
		return err
	}
	defer loc.Close()
	// The node's own capacity; sandbox counts are the control plane's.
	mtr := metrics.New(metrics.Options{NodeID: id, Capacity: loc.node.Capacity, Logger: log, Extra: loc.collectors()})
	// The node's own application: its data plane, on tokens the control
	// plane signed. Policy (quotas, budgets, timeouts) is the control
	// plane's: nothing here creates or runs a sandbox.
	app := control.New(control.Options{Store: st, Node: ownSandboxes{loc.node, id}, Catalog: loc.cat, TokenKey: keys.TokenKey,
		Calls: callsOf(cfg), Logger: log})
	srv := server.New(server.Options{Control: app, Version: version.Version, PublicURL: self, PublicDomain: cfg.PublicDomain,
		GuestDomains: guestDomains(cfg), DataPlane: dataPlaneOf(cfg), Logger: log, Metrics: mtr})
	mux := http.NewServeMux()
	// The control plane's calls, on its call key for this node; they
	// include the guest reads and template builds of the public API.
	mux.Handle(nodeapi.Handler(loc.node, st, callKey, loc.cat))
	// The data plane of this node's sandboxes, on tokens the control plane
	// signed: exec and file bytes never pass through the control plane.
	h := srv.Handler()
	mux.Handle(api.DataPath+"/", h)
	// E2B's envd for this node's sandboxes, on tokens the control plane signed.
	mux.Handle(e2b.Prefix+"/envd/", e2b.New(e2b.Options{App: app, Logger: log}).EnvdHandler())
	mux.Handle("GET /healthz", h)
	mux.Handle("GET /metrics", h)

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go loc.node.WatchVMs(wctx, 2*time.Second)
	every := time.Duration(keys.HeartbeatMillis) * time.Millisecond
	go heartbeat(wctx, log, ctl, reg, callKey, loc, dataDir, max(every, 200*time.Millisecond))

	caps := loc.driver.Capabilities()
	log.Info("zeishd node agent listening", "addr", self, "node", id, "region", region, "labels", labels, "control", controlURL,
		"protocol", nodeapi.Format(keys.Version.GetMajor(), keys.Version.GetMinor()),
		"accel", caps.Accel, "memory_budget_mib", cfg.MemoryBudgetMiB, "data_dir", dataDir, "version", version.Version)
	return serve(ctx, log, cfg, ln, mux, hosts, e2bEnvd, srv.IsHostPort)
}

// nodeStore is what a node agent reads and writes the shared tables with:
// with a control plane of protocol 2.3, its store calls (the node opens no
// database, ZEISH_DATABASE_URL is unused); with one of 2.2, which has no
// store calls, the PostgreSQL database as before (ZEISH_DATABASE_URL
// required). The node's VMs' private state is kept in its data dir
// (vmstate/) in the first case, in the rows in the second.
func nodeStore(ctx context.Context, log *slog.Logger, cfg *config.Config, ctl *controls, minor uint32, dataDir string) (store.Store, error) {
	if minor < nodeapi.MinorStore {
		log.Warn("the control plane speaks node protocol "+nodeapi.Format(nodeapi.ProtocolMajor, minor)+", without store calls: this node opens the database (ZEISH_DATABASE_URL) as nodes of that version do",
			"protocol", nodeapi.Format(nodeapi.ProtocolMajor, minor))
		st, _, err := clusterStore(ctx, cfg, nil)
		return st, err
	}
	if cfg.DatabaseURL != "" {
		log.Warn("ZEISH_DATABASE_URL is set on this node agent but unused: a node of protocol 2.3 opens no database (remove it from the node's environment)")
	}
	return nodestore.New(ctl, filepath.Join(dataDir, "vmstate"), log)
}

// joinAndRegister announces the node with its credential (joining first
// if it has none) until the control plane answers (it may start after the
// node) or ctx ends. A credential the control plane refuses (revoked) is
// replaced when ZEISH_JOIN_TOKEN holds a new join token for this node.
func joinAndRegister(ctx context.Context, log *slog.Logger, cfg *config.Config, ctl *controls, req *nodev2.RegisterRequest) (*nodev2.RegisterReply, error) {
	cred, fromFile, err := nodeCredential(ctx, log, cfg, ctl, req.NodeId)
	if err != nil {
		return nil, err
	}
	ctl.setCredential(cred)
	register := func() (*connect.Response[nodev2.RegisterReply], error) {
		return ctl.Register(ctx, connect.NewRequest(req))
	}
	rep, err := untilAnswered(ctx, log, "register with the control plane", register)
	if tok, _ := joinTokenSetting(cfg); errdefs.Of(err) == errdefs.ErrUnauthenticated && fromFile && tok != "" {
		log.Warn("the control plane refused this node's credential; joining again with the join token it was started with", "err", err)
		if cred, err = join(ctx, log, cfg, ctl, req.NodeId); err != nil {
			return nil, err
		}
		ctl.setCredential(cred)
		rep, err = untilAnswered(ctx, log, "register with the control plane", register)
	}
	if err != nil {
		return nil, err
	}
	return rep.Msg, nil
}

// capacityOf is what the node can promise now.
func capacityOf(loc *local, dataDir string) (*nodev2.Capacity, bool) {
	c, err := loc.node.Capacity()
	caps := loc.driver.Capabilities()
	out := &nodev2.Capacity{MemoryBudgetMib: int64(c.BudgetMiB), MemoryCommittedMib: int64(c.CommittedMiB),
		ImageRamMib: int64(c.ImageRAMMiB), ImageDiskMib: int64(c.ImageDiskMiB), Vcpus: int32(runtime.NumCPU()), Accel: string(caps.Accel), Vmm: caps.Name}
	var fs syscall.Statfs_t
	if syscall.Statfs(dataDir, &fs) == nil {
		out.DiskFreeMib = int64(fs.Bavail * uint64(fs.Bsize) >> 20)
	}
	return out, err == nil // a node that cannot read its store is not healthy
}

// heartbeat reports the node alive every interval, registers again when
// the control plane no longer knows it, and rejoins the sandboxes marked
// lost while it was away.
func heartbeat(ctx context.Context, log *slog.Logger, ctl *controls, reg *nodev2.RegisterRequest, callKey *nodeapi.CallKey, loc *local, dataDir string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	draining := false
	for {
		c, healthy := capacityOf(loc, dataDir)
		rep, err := ctl.Heartbeat(ctx, connect.NewRequest(&nodev2.HeartbeatRequest{NodeId: reg.NodeId, Capacity: c, Healthy: healthy}))
		switch {
		case err == nil:
			if rep.Msg.Draining != draining {
				draining = rep.Msg.Draining
				log.Info("node drain", "draining", draining)
			}
			loc.node.Rejoin(ctx)
		case connect.CodeOf(err) == connect.CodeNotFound:
			reg.Capacity, reg.Healthy = c, healthy
			if rep, err := ctl.Register(ctx, connect.NewRequest(reg)); err != nil {
				log.Warn("register again", "err", err)
			} else {
				callKey.Set(rep.Msg.CallKey)
			}
		case connect.CodeOf(err) == connect.CodeUnauthenticated:
			log.Error("the control plane refuses this node's credential (revoked?): its sandboxes keep running, but it gets no work until it joins again with a join token made for it", "err", err)
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

// e2bEnvd: a node agent serves E2B's envd by path only.
func e2bEnvd(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, e2b.Prefix+"/envd/") }

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
				Capacity: metrics.Capacity{BudgetMiB: c.MemoryBudgetMiB, CommittedMiB: c.MemoryCommittedMiB, ImageRAMMiB: c.ImageRAMMiB, ImageDiskMiB: c.ImageDiskMiB},
				Healthy:  n.Healthy, Live: cluster.Live(n, now, lostAfter), Draining: n.Draining,
				SecondsSinceBeat: now.Sub(n.HeartbeatAt).Seconds()})
		}
		return out, nil
	}
}
