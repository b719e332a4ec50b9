// Package metrics is zeishd's Prometheus exposition at GET /metrics:
// sandboxes by state, the pause forks cost their parents, and the node's
// memory. Counts are read from the store and the node at each scrape, so
// every replica reports the same truth and nothing drifts.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Capacity is a node's memory as it promises it.
type Capacity struct {
	BudgetMiB    int // guest memory the node may promise (0: no limit)
	CommittedMiB int // promised to sandboxes that may run
	ImageRAMMiB  int // held in tmpfs by saved images (snapshots, fork bases)
	ImageDiskMiB int // images' RAM moved to disk when they went cold (this node only)
	// Ready VMs of warm templates (this node only), and the warm creates
	// that took one (hits) or found none (misses) since the node started.
	ReadyVMs               int
	ReadyHits, ReadyMisses int64
}

// Options say where the numbers come from.
type Options struct {
	Store    store.Store // nil: no sandbox counts (a node agent: the control plane has them)
	NodeID   string
	Capacity func() (Capacity, error) // nil: no node metrics
	// Nodes, on a control plane, lists the node agents: each one's last
	// reported capacity, health and liveness.
	Nodes func(ctx context.Context) ([]NodeState, error)
	// Extra are more collectors to serve (the image store's).
	Extra  []prometheus.Collector
	Logger *slog.Logger
}

// NodeState is one node agent as the control plane last heard of it.
type NodeState struct {
	ID, Region       string
	Capacity         Capacity
	VCPUs            int
	Healthy, Live    bool
	Draining         bool
	SecondsSinceBeat float64
}

// Metrics holds the registry and the instruments the server feeds.
type Metrics struct {
	registry *prometheus.Registry
	// ForkPause observes how long each fork paused its parent.
	ForkPause prometheus.Histogram
}

// New registers zeish's collectors and Go's own.
func New(o Options) *Metrics {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		ForkPause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "zeish_fork_pause_seconds",
			Help:    "How long a fork paused its parent (the clone response's pause_ms).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
	}
	m.registry.MustRegister(m.ForkPause, &stateCollector{o: o},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.registry.MustRegister(o.Extra...)
	return m
}

// Handler serves the exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

var (
	sandboxesDesc = prometheus.NewDesc("zeish_sandboxes", "Sandboxes by state (destroyed ones not counted).", []string{"state"}, nil)
	budgetDesc    = prometheus.NewDesc("zeish_node_memory_budget_mib", "Guest memory the node may promise (0: no limit).", []string{"node"}, nil)
	committedDesc = prometheus.NewDesc("zeish_node_memory_committed_mib", "Guest memory promised to sandboxes that may run.", []string{"node"}, nil)
	imageDesc     = prometheus.NewDesc("zeish_node_image_ram_mib", "RAM that saved images hold in tmpfs.", []string{"node"}, nil)
	imageDiskDesc = prometheus.NewDesc("zeish_node_image_disk_mib", "RAM of cold images, moved from tmpfs to the data dir's disk.", []string{"node"}, nil)
	readyDesc     = prometheus.NewDesc("zeish_node_ready_vms", "VMs of warm templates launched, loaded and paused for the next create.", []string{"node"}, nil)
	claimsDesc    = prometheus.NewDesc("zeish_node_warm_creates_total", "Creates from a warm image, by whether a ready VM was there (hit) or not (miss).", []string{"node", "ready"}, nil)
	upDesc        = prometheus.NewDesc("zeish_node_up", "1 when the node agent heartbeats in time and reports itself healthy.", []string{"node", "region"}, nil)
	drainingDesc  = prometheus.NewDesc("zeish_node_draining", "1 while the node takes no new sandboxes.", []string{"node", "region"}, nil)
	vcpusDesc     = prometheus.NewDesc("zeish_node_vcpus", "The node's host CPUs.", []string{"node", "region"}, nil)
	beatDesc      = prometheus.NewDesc("zeish_node_heartbeat_age_seconds", "Seconds since the node's last heartbeat.", []string{"node", "region"}, nil)
)

// liveStates are the states counted; destroyed sandboxes are history.
var liveStates = sandbox.LiveStates

// stateCollector reads the store at each scrape.
type stateCollector struct{ o Options }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.o.Store != nil {
		ch <- sandboxesDesc
	}
	if c.o.Nodes != nil {
		for _, d := range []*prometheus.Desc{upDesc, drainingDesc, vcpusDesc, beatDesc} {
			ch <- d
		}
	}
	if c.o.Capacity != nil || c.o.Nodes != nil {
		ch <- budgetDesc
		ch <- committedDesc
		ch <- imageDesc
	}
	if c.o.Capacity != nil {
		ch <- imageDiskDesc
		ch <- readyDesc
		ch <- claimsDesc
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.o.Store != nil {
		c.collectSandboxes(ctx, ch)
	}
	if c.o.Nodes != nil {
		c.collectNodes(ctx, ch)
	}
	if c.o.Capacity == nil {
		return
	}
	capy, err := c.o.Capacity()
	if err != nil {
		c.o.Logger.Warn("metrics: node capacity", "err", err)
		ch <- prometheus.NewInvalidMetric(budgetDesc, err)
		return
	}
	memoryMetrics(ch, c.o.NodeID, capy)
	ch <- prometheus.MustNewConstMetric(imageDiskDesc, prometheus.GaugeValue, float64(capy.ImageDiskMiB), c.o.NodeID)
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, float64(capy.ReadyVMs), c.o.NodeID)
	ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.CounterValue, float64(capy.ReadyHits), c.o.NodeID, "hit")
	ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.CounterValue, float64(capy.ReadyMisses), c.o.NodeID, "miss")
}

// memoryMetrics sends one node's memory gauges.
func memoryMetrics(ch chan<- prometheus.Metric, node string, c Capacity) {
	ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(c.BudgetMiB), node)
	ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.GaugeValue, float64(c.CommittedMiB), node)
	ch <- prometheus.MustNewConstMetric(imageDesc, prometheus.GaugeValue, float64(c.ImageRAMMiB), node)
}

func (c *stateCollector) collectNodes(ctx context.Context, ch chan<- prometheus.Metric) {
	nodes, err := c.o.Nodes(ctx)
	if err != nil {
		c.o.Logger.Warn("metrics: nodes", "err", err)
		ch <- prometheus.NewInvalidMetric(upDesc, err)
		return
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, n := range nodes {
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, b(n.Live && n.Healthy), n.ID, n.Region)
		ch <- prometheus.MustNewConstMetric(drainingDesc, prometheus.GaugeValue, b(n.Draining), n.ID, n.Region)
		ch <- prometheus.MustNewConstMetric(vcpusDesc, prometheus.GaugeValue, float64(n.VCPUs), n.ID, n.Region)
		ch <- prometheus.MustNewConstMetric(beatDesc, prometheus.GaugeValue, n.SecondsSinceBeat, n.ID, n.Region)
		memoryMetrics(ch, n.ID, n.Capacity)
		// Nodes of protocol 2.0 do not report it: 0.
		ch <- prometheus.MustNewConstMetric(imageDiskDesc, prometheus.GaugeValue, float64(n.Capacity.ImageDiskMiB), n.ID)
	}
}

func (c *stateCollector) collectSandboxes(ctx context.Context, ch chan<- prometheus.Metric) {
	rows, err := c.o.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		c.o.Logger.Warn("metrics: list sandboxes", "err", err)
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, err)
	} else {
		counts := map[sandbox.State]int{}
		for _, r := range rows {
			counts[r.State]++
		}
		for _, st := range liveStates {
			ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
		}
	}
}
