package lazyram

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/zeish/zeish/internal/imagestore"
)

// Metrics are lazy RAM's instruments. The chunk reads of its store are
// counted apart from whole fetches (zeish_image_fetch_bytes_total):
// zeish_image_lazy_fetch_bytes_total is what the guests' faults and the
// prefetches read from the image store.
type Metrics struct {
	store           *imagestore.Metrics
	Maps            prometheus.Counter
	Images          prometheus.Gauge
	Prefetches      *prometheus.CounterVec
	PrefetchSeconds prometheus.Histogram
}

func newMetrics() *Metrics {
	st := imagestore.NewMetricsNamed("zeish_image_lazy_", ", for RAM served lazily (guests' faults and background prefetches)")
	return &Metrics{
		store: st,
		Maps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "zeish_image_lazy_maps_total",
			Help: "Starts of VMs on image RAM served lazily from the image store (the RAM was not fetched first).",
		}),
		Images: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zeish_image_lazy_images",
			Help: "Images whose RAM this node serves lazily now (0: nothing is mounted).",
		}),
		Prefetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeish_image_lazy_prefetch_total",
			Help: "Background prefetches of lazily served RAM: done (the RAM is local now) or retried (a store read failed).",
		}, []string{"result"}),
		PrefetchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "zeish_image_lazy_prefetch_duration_seconds",
			Help:    "From a lazy start to its image's RAM being local (prefetched and written to tmpfs).",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
}

// Collectors are what to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.store.FetchBytes, m.store.FetchSeconds, m.store.CacheHits, m.store.CacheMisses,
		m.Maps, m.Images, m.Prefetches, m.PrefetchSeconds}
}

// FetchBytes is the bytes read from the store so far.
func (m *Metrics) FetchBytes() prometheus.Counter { return m.store.FetchBytes }
