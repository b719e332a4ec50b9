// Package control is zeish's application: every call a client can make,
// whatever front end it came through (the REST API and console in
// internal/server, the E2B facade in internal/e2b), and every policy on
// it. It turns a request into a record (create, fork, snapshot clone,
// restore, templates, secrets), applies the account's quotas, budgets and
// timeouts, fork inheritance, feature checks and names, issues and checks
// data-plane tokens, and runs the background loops (Enforce). It takes
// and returns api types and errdefs errors; a node (Node) carries the work
// out, the store keeps it. Front ends decode, call one method here, and
// encode; docs/ describes the rules (docs/sandboxes.md, docs/quotas.md).
package control

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/metering"
	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Options configure a Control.
type Options struct {
	Store store.Store
	Node  Node
	// Catalog says which template a name means and builds templates.
	Catalog *catalog.Catalog
	Plan    Plan // zero: DefaultPlan
	// Prices is the price table (zero: metering.DefaultPrices); a
	// sandbox's cost, and so its budget, is measured with it.
	Prices metering.Prices
	// TokenKey signs and verifies data-plane tokens (TokenKey(dataDir)
	// makes and keeps one; a node agent gets its own at registration, so
	// it verifies tokens offline).
	TokenKey []byte
	// TokenKeyFor, when set, is the key of the tokens of node host's
	// sandboxes (a control plane: each node has its own, derived from the
	// data dir's key, see internal/cluster's DataPlaneKey).
	TokenKeyFor func(host string) []byte
	// Cluster, when set, is the control plane's registry of node agents
	// (the admin API's nodes).
	Cluster Cluster
	// Metrics, when set, is fed what the application measures (fork
	// pauses).
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Replica names this control-plane process among those sharing the
	// store (leases are held in its name); "": host name and process id.
	Replica string
	// Calls bounds the data plane's work in flight (nil: DefaultCalls).
	Calls *CallLimits
	// Images is the image store the nodes share (nil: none): views show
	// which snapshots and stopped sandboxes are durable in it.
	Images ImageDurability
	// Sweeper, when set, is the image store SweepImages collects.
	Sweeper ImageSweeper
}

// Control is the application: every call, every policy.
type Control struct {
	store   store.Store
	node    Node
	catalog *catalog.Catalog
	quotas  *quotas
	prices  metering.Prices
	tokens  tokenSigner
	calls   *callLimiter // data-plane calls in flight per sandbox and per account
	images  ImageDurability
	sweeper ImageSweeper
	cluster Cluster
	metrics *metrics.Metrics
	log     *slog.Logger
	replica string
	// cost is what a sandbox has cost so far at now, in micro-dollars; nil:
	// budgets are not enforced (tests of other policies).
	cost func(r *store.SandboxRecord, now time.Time) int64
}

// New makes a Control.
func New(o Options) *Control {
	if o.Plan == (Plan{}) {
		o.Plan = DefaultPlan
	}
	if o.Prices == (metering.Prices{}) {
		o.Prices = metering.DefaultPrices
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Replica == "" {
		host, _ := os.Hostname()
		o.Replica = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	q := newQuotas(o.Plan, o.Store)
	q.log = o.Logger
	c := &Control{store: o.Store, node: o.Node, catalog: o.Catalog, quotas: q, prices: o.Prices,
		tokens: tokenSigner{key: o.TokenKey, keyFor: o.TokenKeyFor}, calls: newCallLimiter(o.callLimits()), images: o.Images, sweeper: o.Sweeper, cluster: o.Cluster,
		metrics: o.Metrics, log: o.Logger, replica: o.Replica}
	c.cost = c.costAt
	return c
}

// Plan is every account's quota.
func (c *Control) Plan() Plan { return c.quotas.plan }

// Capabilities are the VMM's of the node sandboxes run on (for /healthz).
func (c *Control) Capabilities() vmm.Capabilities { return c.node.Capabilities() }

// view is a sandbox as a client sees it, its cost computed now from its
// recorded intervals (so it is always fresh).
func (c *Control) view(r *store.SandboxRecord) sandbox.Sandbox {
	sb := r.Sandbox
	sb.CostMicros = c.costAt(r, time.Now())
	if r.ResumeImage != "" { // stopped: its saved state is an image
		sb.ImageDurable = c.durable(context.Background(), r.ResumeImage)
	}
	return sb
}

func (c *Control) views(rs []*store.SandboxRecord) []sandbox.Sandbox {
	out := make([]sandbox.Sandbox, 0, len(rs))
	for _, r := range rs {
		out = append(out, c.view(r))
	}
	return out
}

func (c *Control) costAt(r *store.SandboxRecord, now time.Time) int64 {
	return metering.Measure(r, time.Time{}, time.Time{}, now, c.prices).CostMicros
}

// settleWait bounds the wait of a call made with ?wait=true.
const settleWait = 600 * time.Second

// Settled is sb once it settled (no operation in flight), waiting at most
// ten minutes: how a call made with ?wait=true ends.
func (c *Control) Settled(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	r, err := c.node.Wait(ctx, sb.ID, "")
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

// SettledAll is Settled for the sandboxes one call made, within one wait.
func (c *Control) SettledAll(ctx context.Context, sbs []sandbox.Sandbox) ([]sandbox.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	out := make([]sandbox.Sandbox, len(sbs))
	for i, sb := range sbs {
		r, err := c.node.Wait(ctx, sb.ID, "")
		if err != nil {
			return nil, err
		}
		out[i] = c.view(r)
	}
	return out, nil
}
