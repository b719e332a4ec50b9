package imagestore

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the store's instruments. zeishd registers Collectors() in
// the registry it serves at /metrics.
type Metrics struct {
	// FetchBytes counts chunk bytes read from the store (cache misses),
	// verified.
	FetchBytes prometheus.Counter
	// FetchSeconds observes how long fetches took: one chunk read from the
	// store (what="chunk", a lazy read waits this long on a miss) or one
	// whole file written out (what="file").
	FetchSeconds *prometheus.HistogramVec
	// UploadBytes counts chunk bytes put into the store.
	UploadBytes prometheus.Counter
	// CacheHits and CacheMisses count chunk reads the local cache served
	// or did not.
	CacheHits, CacheMisses prometheus.Counter
	// SweptImages counts images a sweep deleted (nothing referred to
	// them); FreedBytes the chunk bytes gc deleted after.
	SweptImages, FreedBytes prometheus.Counter
}

// NewMetrics makes the instruments, unregistered.
func NewMetrics() *Metrics { return NewMetricsNamed("zeish_image_", "") }

// NewMetricsNamed makes the instruments with names that start with prefix
// and help texts that end with about (a second store of one process, such
// as the node's lazy RAM, counts apart).
func NewMetricsNamed(prefix, about string) *Metrics {
	return &Metrics{
		FetchBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "fetch_bytes_total",
			Help: "Image bytes read from the image store (chunk cache misses), after their digest was verified" + about + ".",
		}),
		FetchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "fetch_duration_seconds",
			Help:    "How long a fetch from the image store took: one chunk (what=chunk) or one whole file (what=file)" + about + ".",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"what"}),
		UploadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "upload_bytes_total",
			Help: "Image bytes put into the image store (chunks it did not hold yet)" + about + ".",
		}),
		CacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "cache_hits_total",
			Help: "Chunk reads served by the node's local chunk cache" + about + ".",
		}),
		CacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "cache_misses_total",
			Help: "Chunk reads the node's local chunk cache did not hold (fetched from the store)" + about + ".",
		}),
		SweptImages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zeish_image_sweep_images_total",
			Help: "Images deleted from the image store by the control plane's sweep: no record, no node's claim and no kept image referred to them.",
		}),
		FreedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zeish_image_gc_freed_bytes_total",
			Help: "Chunk bytes the image store's gc deleted (no manifest and no lease listed them).",
		}),
	}
}

// Collectors are what to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.FetchBytes, m.FetchSeconds, m.UploadBytes, m.CacheHits, m.CacheMisses, m.SweptImages, m.FreedBytes}
}
