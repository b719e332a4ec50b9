// Command zeishd is zeish's server: the REST API, the store and the node that
// runs VMs, in one process, or (`zeishd control`, `zeishd node`) one of
// the two roles of a cluster (cluster.go).
//
// Its configuration is the environment, read and checked once at start by
// internal/config (README's configuration table lists every variable).
// main builds the application (internal/control) and hands it to the front
// ends: the REST API and console (internal/server) and the E2B facade
// (internal/e2b).
//
// SIGINT/SIGTERM stop the API and drop agent connections; running sandboxes
// keep running, and the next zeishd finds them again.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/e2b"
	"github.com/zeish/zeish/internal/metering"
	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/server"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/postgres"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/version"
	zeish "github.com/zeish/zeish/sdk/go"
	"github.com/zeish/zeish/template"
	"github.com/zeish/zeish/vmm"
	"github.com/zeish/zeish/vmm/qemu"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && (os.Args[1] == "--version" || os.Args[1] == "version") {
		fmt.Println("zeishd", version.Version)
		return
	}
	// The first argument is a role, or a command that is not one.
	probe := len(os.Args) > 1 && os.Args[1] == "--accel-probe"
	admin := len(os.Args) > 1 && isAdminCommand(os.Args[1])
	args := os.Args[1:]
	if probe || admin {
		args = nil
	}
	cfg, err := config.FromEnvironment(args, thisHost())
	if err != nil {
		fmt.Fprintf(os.Stderr, "zeishd: bad configuration:\n%v\n", err)
		os.Exit(2)
	}
	switch {
	case admin:
		if err := adminCommand(ctx, cfg, os.Args[1:], os.Stdout); err != nil {
			slog.Error("zeishd "+os.Args[1], "err", err)
			os.Exit(1)
		}
		return
	case probe:
		err = probeAccel(ctx, cfg)
	case cfg.Role == config.RoleControl:
		err = runControl(ctx, cfg)
	case cfg.Role == config.RoleNode:
		err = runNode(ctx, cfg)
	default:
		err = run(ctx, cfg)
	}
	if err != nil {
		slog.Error("zeishd", "err", err)
		os.Exit(1)
	}
}

// thisHost is what the configuration's host-dependent defaults need.
func thisHost() config.Host {
	h := config.Host{Root: os.Geteuid() == 0, DataDir: zeish.DefaultDataDir()}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		h.MemoryMiB = int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
	}
	return h
}

// openDataDir makes and locks the data dir, for every role. One zeishd
// per data dir: a second would recover the first one's VMs as orphans and
// kill them.
func openDataDir(cfg *config.Config) (unlock func(), err error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	return datadir.Lock(cfg.DataDir)
}

func logger(cfg *config.Config) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel)) // checked by config
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func run(ctx context.Context, cfg *config.Config) error {
	log := logger(cfg)
	slog.SetDefault(log)
	hosts, err := loadHostTLS(cfg)
	if err != nil {
		return err
	}
	unlock, err := openDataDir(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	dataDir := cfg.DataDir
	box, err := secrets.LoadOrCreate(dataDir)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg, box)
	if err != nil {
		return err
	}
	defer st.Close()
	keyPath, err := control.EnsureAdmin(ctx, st, dataDir)
	if err != nil {
		return err
	}
	nodeID, err := nodeID(dataDir)
	if err != nil {
		return err
	}
	remote, err := openImageStore(ctx, log, cfg, "/dev/shm")
	if err != nil {
		return err
	}
	loc, err := openLocal(ctx, log, cfg, st, nodeID, false, remote)
	if err != nil {
		return err
	}
	defer loc.Close() // after the HTTP server is down: VMs keep running
	n, cat, driver := loc.node, loc.cat, loc.driver

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	tokenKey, err := control.TokenKey(dataDir)
	if err != nil {
		return err
	}
	plan := planOf(cfg)
	mtr := metrics.New(metrics.Options{Store: st, NodeID: nodeID, Capacity: n.Capacity, Logger: log, Extra: loc.collectors()})
	var images control.ImageDurability
	var sweeper control.ImageSweeper
	if loc.images != nil {
		images, sweeper = loc.images, loc.images
	}
	ctl := control.New(control.Options{Store: st, Node: n, Catalog: cat, Plan: plan, Prices: pricesOf(cfg), TokenKey: tokenKey,
		Calls: callsOf(cfg), Images: images, Sweeper: sweeper, Metrics: mtr, Logger: log})
	srv := server.New(server.Options{Control: ctl, Metrics: mtr, Version: version.Version, PublicURL: cfg.PublicURL,
		PublicDomain: cfg.PublicDomain, GuestDomains: guestDomains(cfg), DataPlane: dataPlaneOf(cfg), Logger: log})
	// Budget stops and timeouts go through the node: the enforcer ends
	// before the node closes (defers run last first).
	bctx, stopBudgets := context.WithCancel(ctx)
	budgetsDone := make(chan struct{})
	go func() { defer close(budgetsDone); ctl.Enforce(bctx, 2*time.Second) }()
	defer func() { stopBudgets(); <-budgetsDone }()
	go ctl.SweepImages(bctx, cfg.ImageSweepEvery) // nothing without an image store
	// A VM that exits on its own leaves its sandbox error (vm_exited).
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); n.WatchVMs(wctx, 2*time.Second) }()
	defer func() { stopWatch(); <-watchDone }()
	apiHandler := srv.Handler()
	facade := e2b.New(e2b.Options{App: ctl, Logger: log, Domain: cfg.E2BDomain}) // E2B's SDKs, under /e2b
	defer facade.Close()
	caps := driver.Capabilities()
	log.Info("zeishd listening", "addr", hosts.scheme()+"://"+ln.Addr().String(), "data_dir", dataDir, "node", nodeID,
		"vmm", caps.Name, "accel", caps.Accel, "accel_reason", caps.AccelReason, "accel_probe_ms", caps.AccelProbeMS, "confinement", caps.Confinement, "memory_budget_mib", cfg.MemoryBudgetMiB, "plan", fmt.Sprintf("%+v", plan), "admin_key", keyPath, "version", version.Version)
	return serve(ctx, log, cfg, ln, facade.Mount(apiHandler), hosts, facade.IsStream, srv.IsHostPort)
}

// planOf is the quota plan every account gets.
func planOf(cfg *config.Config) control.Plan {
	return control.Plan{RunningSlots: cfg.PlanRunningSlots, CreatesPerMinute: cfg.PlanCreatesPerMinute, DailyCreates: cfg.PlanDailyCreates}
}

// pricesOf is the price table.
func pricesOf(cfg *config.Config) metering.Prices {
	return metering.Prices{VCPUSecond: cfg.PriceVCPUSecondMicros, MemoryGiBSecond: cfg.PriceMemoryGiBSecondMicros,
		DiskGiBSecond: cfg.PriceDiskGiBSecondMicros}
}

// callsOf is what the data plane lets each sandbox and account hold at
// once.
func callsOf(cfg *config.Config) *control.CallLimits {
	return &control.CallLimits{PerSandbox: cfg.DataCallsPerSandbox, PerAccount: cfg.DataCallsPerAccount}
}

// dataPlaneOf bounds the data plane's connections to guests.
func dataPlaneOf(cfg *config.Config) *server.DataPlaneLimits {
	return &server.DataPlaneLimits{PortHeaders: cfg.PortHeaderTimeout, Idle: cfg.DataIdleTimeout}
}

// guestDomains are the front ends' domains whose host names lead to guest
// ports (E2B's): pages asked for by them are on their port's own origin.
func guestDomains(cfg *config.Config) []string {
	if cfg.E2BDomain != "" {
		return []string{cfg.E2BDomain}
	}
	return nil
}

// nodeID is kept in the data dir so sandboxes keep their host across restarts.
func nodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "node.id")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	host, _ := os.Hostname()
	id := "node-" + strings.ToLower(strings.SplitN(host, ".", 2)[0])
	if host == "" {
		id = "node-local"
	}
	return id, os.WriteFile(path, []byte(id+"\n"), 0o600)
}

// sandboxdPath finds the guest agent binary the base template installs.
func sandboxdPath(cfg *config.Config) (string, error) {
	if cfg.Sandboxd != "" {
		return cfg.Sandboxd, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(exe), "sandboxd")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("guest agent %s not found (build it with `make build`, or set ZEISH_SANDBOXD): %w", p, err)
	}
	return p, nil
}

// accelCacheName is the accelerator verdict's file in the data dir.
const accelCacheName = "accel.json"

// guestKernel is the kernel built-in templates boot and the KVM probe tries:
// ZEISH_KERNEL (e.g. a PVM-built kernel on a kvm_pvm host), else the newest
// Debian cloud kernel in /boot.
func guestKernel(cfg *config.Config) (string, error) {
	if cfg.Kernel != "" {
		return filepath.Abs(cfg.Kernel)
	}
	p, _, err := template.DefaultKernel()
	return p, err
}

// probeAccel re-runs the accelerator probe (ignoring the cached verdict),
// stores the verdict for the next start and prints it as JSON.
func probeAccel(ctx context.Context, cfg *config.Config) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	kernel, err := guestKernel(cfg)
	if err != nil {
		return err
	}
	v, err := qemu.ChooseAccel(ctx, qemu.AccelOptions{Requested: vmm.Accel(cfg.Accel), Kernel: kernel,
		CacheFile: filepath.Join(cfg.DataDir, accelCacheName), Reprobe: true})
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(b))
	return err
}

// openStore opens ZEISH_DATABASE_URL (PostgreSQL, shared by control-plane
// replicas) or, by default, the SQLite database in the data dir.
func openStore(ctx context.Context, cfg *config.Config, box *secrets.Box) (store.Store, error) {
	if cfg.DatabaseURL == "" {
		return sqlite.Open(ctx, filepath.Join(cfg.DataDir, "zeish.db"), sqlite.WithSecrets(box))
	}
	return postgres.Open(ctx, cfg.DatabaseURL, postgres.WithSecrets(box))
}
