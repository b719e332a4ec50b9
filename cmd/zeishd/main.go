// Command zeishd is zeish's server: the REST API, the store and the node that
// runs VMs, in one process.
//
// Configuration is by environment: ZEISH_DATA_DIR (default /var/lib/zeish for
// root), ZEISH_LISTEN (default 127.0.0.1:7420), ZEISH_PUBLIC_URL, ZEISH_SANDBOXD
// (the guest agent binary; default: sandboxd beside zeishd), ZEISH_ACCEL
// (kvm|tcg; default: kvm when a probe boots the guest kernel under it, see
// --accel-probe), ZEISH_KERNEL (the guest kernel; default the newest
// /boot/vmlinuz-*-cloud-amd64), ZEISH_TEMPLATE_CACHE (where
// built templates are kept; default <data dir>/templates), ZEISH_BOOT_TIMEOUT
// (boot to guest-agent answer; default 3m), ZEISH_MEMORY_BUDGET_MIB (guest
// memory the host may promise; default its RAM less max(2 GiB, 10 %)),
// ZEISH_LOG_LEVEL (debug|info|warn); ZEISH_DATABASE_URL (postgres://…; default
// SQLite in the data dir); the per-account plan ZEISH_PLAN_RUNNING_SLOTS
// (default 10), ZEISH_PLAN_CREATES_PER_MINUTE (30), ZEISH_PLAN_DAILY_CREATES
// (500); ZEISH_CONFINE (on|off; default on as root), ZEISH_VM_USER (default
// zeish-vm) and ZEISH_CGROUPS (required|optional; default required: a VM
// whose cgroup limits cannot be set does not start) for the VMMs' confinement; prices in micro-dollars per unit-second ZEISH_PRICE_VCPU_SECOND_MICROS
// (14), ZEISH_PRICE_MEMORY_GIB_SECOND_MICROS (4.5),
// ZEISH_PRICE_DISK_GIB_SECOND_MICROS (0.04).
//
// `zeishd control` (or ZEISH_ROLE=control) is a control-plane replica
// without VMs and `zeishd node` a node agent that joins it once
// (ZEISH_JOIN_TOKEN from `zeishd join-token`) and registers with it
// (ZEISH_CONTROL_URL, ZEISH_NODE_ID, ZEISH_REGION, ZEISH_NODE_LABELS,
// ZEISH_NODE_URL; ZEISH_NODE_LOST_AFTER on the control plane), all on one
// PostgreSQL database, over TLS between hosts (ZEISH_TLS_CERT,
// ZEISH_TLS_KEY, ZEISH_CLUSTER_CA): see cluster.go, join.go and the README.
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
	"strconv"
	"strings"
	"syscall"
	"time"

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
	if len(os.Args) > 1 && os.Args[1] == "--accel-probe" {
		if err := probeAccel(ctx); err != nil {
			slog.Error("zeishd --accel-probe", "err", err)
			os.Exit(1)
		}
		return
	}
	if ok, err := adminCommand(ctx, os.Args[1:], os.Stdout); ok {
		if err != nil {
			slog.Error("zeishd "+os.Args[1], "err", err)
			os.Exit(1)
		}
		return
	}
	r, err := role()
	if err != nil {
		slog.Error("zeishd", "err", err)
		os.Exit(2)
	}
	switch r {
	case roleControl:
		err = runControl(ctx)
	case roleNode:
		err = runNode(ctx)
	default:
		err = run(ctx)
	}
	if err != nil {
		slog.Error("zeishd", "err", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// openDataDir makes and locks ZEISH_DATA_DIR, for every role. One zeishd
// per data dir: a second would recover the first one's VMs as orphans and
// kill them.
func openDataDir() (dir string, unlock func(), err error) {
	dir = env("ZEISH_DATA_DIR", zeish.DefaultDataDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	unlock, err = datadir.Lock(dir)
	if err != nil {
		return "", nil, err
	}
	return dir, unlock, nil
}

func logger() *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(env("ZEISH_LOG_LEVEL", "info")))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func run(ctx context.Context) error {
	log := logger()
	slog.SetDefault(log)
	hosts, err := loadHostTLS()
	if err != nil {
		return err
	}
	dataDir, unlock, err := openDataDir()
	if err != nil {
		return err
	}
	defer unlock()
	box, err := secrets.LoadOrCreate(dataDir)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, dataDir, box)
	if err != nil {
		return err
	}
	defer st.Close()
	keyPath, err := server.EnsureAdmin(ctx, st, dataDir)
	if err != nil {
		return err
	}
	nodeID, err := nodeID(dataDir)
	if err != nil {
		return err
	}
	loc, err := openLocal(ctx, log, dataDir, st, nodeID, false)
	if err != nil {
		return err
	}
	defer loc.Close() // after the HTTP server is down: VMs keep running
	n, cat, driver, budget := loc.node, loc.cat, loc.driver, loc.budget

	ln, err := net.Listen("tcp", env("ZEISH_LISTEN", "127.0.0.1:7420"))
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
	dataPlane, err := dataPlaneLimits()
	if err != nil {
		return err
	}
	mtr := metrics.New(metrics.Options{Store: st, NodeID: nodeID, Capacity: n.Capacity, Logger: log, Extra: loc.collectors()})
	var images server.ImageDurability
	if loc.images != nil {
		images = loc.images
	}
	srv, err := server.New(server.Options{Store: st, Node: n, Catalog: cat, DataDir: dataDir, Metrics: mtr, Images: images,
		Version: version.Version, PublicURL: os.Getenv("ZEISH_PUBLIC_URL"), PublicDomain: os.Getenv("ZEISH_PUBLIC_DOMAIN"),
		GuestDomains: guestDomains(), DataPlane: dataPlane, Logger: log, Plan: &plan, Prices: &prices})
	if err != nil {
		return err
	}
	// Budget stops go through the node: the enforcer ends before the node
	// closes (defers run last first).
	bctx, stopBudgets := context.WithCancel(ctx)
	budgetsDone := make(chan struct{})
	go func() { defer close(budgetsDone); srv.EnforceBudgets(bctx, 2*time.Second) }()
	defer func() { stopBudgets(); <-budgetsDone }()
	// A VM that exits on its own leaves its sandbox error (vm_exited).
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); n.WatchVMs(wctx, 2*time.Second) }()
	defer func() { stopWatch(); <-watchDone }()
	apiHandler := srv.Handler()
	facade := e2b.New(e2b.Options{API: apiHandler, Backend: srv, Templates: cat, Logger: log, Domain: os.Getenv("ZEISH_E2B_DOMAIN")}) // E2B's SDKs, under /e2b
	defer facade.Close()
	caps := driver.Capabilities()
	log.Info("zeishd listening", "addr", hosts.scheme()+"://"+ln.Addr().String(), "data_dir", dataDir, "node", nodeID,
		"vmm", caps.Name, "accel", caps.Accel, "accel_reason", caps.AccelReason, "accel_probe_ms", caps.AccelProbeMS, "confinement", caps.Confinement, "memory_budget_mib", budget, "plan", fmt.Sprintf("%+v", plan), "admin_key", keyPath, "version", version.Version)
	return serve(ctx, log, ln, facade.Mount(apiHandler), hosts)
}

// httpLimits are the HTTP server's limits (ZEISH_MAX_CONNECTIONS; a
// stream's stall limit is ZEISH_DATA_IDLE_TIMEOUT, as in dataPlaneLimits).
func httpLimits() (server.Limits, error) {
	limits := server.DefaultLimits
	if v := os.Getenv("ZEISH_MAX_CONNECTIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return limits, fmt.Errorf("ZEISH_MAX_CONNECTIONS=%q: want a number above 0", v)
		}
		limits.MaxConns = n
	}
	dp, err := dataPlaneLimits()
	if err != nil {
		return limits, err
	}
	limits.StreamIdle = dp.Idle
	return limits, nil
}

// dataPlaneLimits bound the data plane per sandbox and per account
// (ZEISH_DATA_CALLS_PER_SANDBOX, ZEISH_DATA_CALLS_PER_ACCOUNT), the wait for
// a guest port's response headers (ZEISH_PORT_HEADER_TIMEOUT) and how long
// a forward or stream may stall (ZEISH_DATA_IDLE_TIMEOUT); 0 turns each off.
func dataPlaneLimits() (*server.DataPlaneLimits, error) {
	l := server.DefaultDataPlane
	for _, f := range []struct {
		name string
		dst  *int
	}{{"ZEISH_DATA_CALLS_PER_SANDBOX", &l.SandboxCalls}, {"ZEISH_DATA_CALLS_PER_ACCOUNT", &l.AccountCalls}} {
		if v := os.Getenv(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%s=%q: want a whole number, 0 for no limit", f.name, v)
			}
			*f.dst = n
		}
	}
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{"ZEISH_PORT_HEADER_TIMEOUT", &l.PortHeaders}, {"ZEISH_DATA_IDLE_TIMEOUT", &l.Idle}} {
		if v := os.Getenv(f.name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%s=%q: want a duration (1m), 0 for no limit", f.name, v)
			}
			*f.dst = d
		}
	}
	return &l, nil
}

// guestDomains are the front ends' domains whose host names lead to guest
// ports (E2B's): pages asked for by them are on their port's own origin.
func guestDomains() []string {
	if d := os.Getenv("ZEISH_E2B_DOMAIN"); d != "" {
		return []string{d}
	}
	return nil
}

// planFromEnv is the quota plan every account gets.
func planFromEnv() (server.Plan, error) {
	p := server.DefaultPlan
	for _, f := range []struct {
		name string
		dst  *int
	}{{"ZEISH_PLAN_RUNNING_SLOTS", &p.RunningSlots}, {"ZEISH_PLAN_CREATES_PER_MINUTE", &p.CreatesPerMinute},
		{"ZEISH_PLAN_DAILY_CREATES", &p.DailyCreates}} {
		if v := os.Getenv(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return p, fmt.Errorf("%s=%q: want a whole number, 0 or more", f.name, v)
			}
			*f.dst = n
		}
	}
	return p, nil
}

// memoryBudget is the guest memory this host may promise to sandboxes:
// ZEISH_MEMORY_BUDGET_MIB, else the host's RAM less a reserve for the host
// and the VMMs' own memory.
func memoryBudget() (int, error) {
	if v := os.Getenv("ZEISH_MEMORY_BUDGET_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("ZEISH_MEMORY_BUDGET_MIB=%q: want a number of MiB", v)
		}
		return n, nil
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, err
	}
	totalMiB := int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
	reserve := max(2048, totalMiB/10)
	return max(0, totalMiB-reserve), nil
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
func sandboxdPath() (string, error) {
	if p := os.Getenv("ZEISH_SANDBOXD"); p != "" {
		return p, nil
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
func guestKernel() (string, error) {
	if p := os.Getenv("ZEISH_KERNEL"); p != "" {
		return filepath.Abs(p)
	}
	p, _, err := template.DefaultKernel()
	return p, err
}

// probeAccel re-runs the accelerator probe (ignoring the cached verdict),
// stores the verdict for the next start and prints it as JSON.
func probeAccel(ctx context.Context) error {
	dataDir := env("ZEISH_DATA_DIR", zeish.DefaultDataDir())
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	kernel, err := guestKernel()
	if err != nil {
		return err
	}
	v, err := qemu.ChooseAccel(ctx, qemu.AccelOptions{Requested: vmm.Accel(os.Getenv("ZEISH_ACCEL")), Kernel: kernel,
		CacheFile: filepath.Join(dataDir, accelCacheName), Reprobe: true})
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(b))
	return err
}

// openStore opens ZEISH_DATABASE_URL (postgres://…, shared by control-plane
// replicas) or, by default, the SQLite database in the data dir.
func openStore(ctx context.Context, dataDir string, box *secrets.Box) (store.Store, error) {
	url := os.Getenv("ZEISH_DATABASE_URL")
	switch {
	case url == "":
		return sqlite.Open(ctx, filepath.Join(dataDir, "zeish.db"), sqlite.WithSecrets(box))
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return postgres.Open(ctx, url, postgres.WithSecrets(box))
	}
	return nil, fmt.Errorf("ZEISH_DATABASE_URL: want postgres://… (or unset for SQLite in the data dir)")
}
