package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/node/lazyram"
)

// openImageStore opens the image store the cluster's nodes share, named by
// ZEISH_IMAGE_STORE (s3://bucket/prefix?endpoint=…, or file:///path for a
// folder every node mounts): nil when unset, the single-host default where
// images stay on their host. A store that refuses the credentials, or has
// no such bucket, stops zeishd at start with a message saying so: the
// setting is wrong and will not mend itself. One that cannot be reached
// is logged and zeishd starts: a store's outage must not keep a control
// plane or a node down (their sandboxes with it), and every use of the
// store after start copes with its absence (docs/images.md, "When the
// store is away").
func openImageStore(ctx context.Context, log *slog.Logger, cfg *config.Config, shmDir string) (*images.Remote, error) {
	if cfg.ImageStore == "" {
		return nil, nil
	}
	b, err := imagestore.NewBackend(cfg.ImageStore)
	if err != nil {
		return nil, fmt.Errorf("ZEISH_IMAGE_STORE: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := imagestore.Check(cctx, b); errors.Is(err, blob.ErrUnreachable) {
		log.Warn("image store: cannot be reached at start; starting without it until it answers (fetches fail as unavailable, uploads are retried)",
			"store", b.String(), "err", err)
	} else if err != nil {
		return nil, fmt.Errorf("ZEISH_IMAGE_STORE: %w", err)
	}
	// Needs and SweepGrace serve the control plane's sweep (a node's
	// store never sweeps).
	st := imagestore.New(b, imagestore.Options{Logger: log, Needs: images.Needs, SweepGrace: cfg.ImageSweepGrace})
	log.Info("image store", "store", st.String())
	go collectStore(ctx, log, st)
	return &images.Remote{Store: st, ShmDir: shmDir, WaitDurable: cfg.ImageFetchWait}, nil
}

// collectStore runs the image store's chunk gc hourly: chunks no manifest
// or lease lists go (images themselves are deleted by the nodes' gc, when
// no record needs them, and by the control plane's sweep). Every node and
// replica runs it; runs may overlap safely.
func collectStore(ctx context.Context, log *slog.Logger, st *imagestore.Store) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if stats, err := st.GC(ctx); err != nil {
			log.Warn("image store gc", "err", err)
		} else if stats.Deleted > 0 {
			log.Info("image store gc", "deleted_chunks", stats.Deleted, "deleted_bytes", stats.DeletedBytes)
		}
	}
}

// collectors are the image store's metrics, for /metrics (none without one).
func (l *local) collectors() []prometheus.Collector {
	if l.images == nil {
		return nil
	}
	out := l.images.Metrics().Collectors()
	if l.lazy != nil {
		out = append(out, l.lazy.Metrics().Collectors()...)
	}
	return out
}

// openLazyRAM serves the RAM of images fetched for remote starts lazily
// (ZEISH_LAZY_RAM=on; off by default: measured no faster than the whole
// fetch at this cluster's sizes, docs/images.md), in <data>/lazyram; nil when off or
// when this host cannot (no /dev/fuse, not root): the node then fetches
// RAM whole, and says so.
func openLazyRAM(log *slog.Logger, cfg *config.Config, remote *images.Remote, nodeID string) *lazyram.RAM {
	if cfg.LazyRAM == "off" {
		log.Info("lazy RAM off (ZEISH_LAZY_RAM): remote starts fetch the image's RAM whole first")
		return nil
	}
	lazy, err := lazyram.Open(lazyram.Options{Dir: filepath.Join(cfg.DataDir, "lazyram"), Backend: remote.Store.Backend(),
		Holder: nodeID, Logger: log})
	if err != nil {
		log.Warn("lazy RAM unavailable: remote starts fetch the image's RAM whole first", "err", err)
		return nil
	}
	return lazy
}
