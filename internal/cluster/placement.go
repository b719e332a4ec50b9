// Package cluster is the control plane's side of many nodes: the node
// registry (registration and heartbeats over the Control service, kept in
// the database), placement, a control.Node that routes every call to the
// sandbox's node, and the watch that marks a silent node's sandboxes lost.
package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// Want is what a new sandbox needs of its node.
type Want struct {
	Region string // "" any
	Accel  string // "" any
	// Labels must all be on the node, with these values (its
	// ZEISH_NODE_LABELS).
	Labels map[string]string
	// Node, when set, is the only node that can run the template (the
	// one that built it and holds its files).
	Node      string
	MemoryMiB int
}

// hasLabels reports whether n carries every label of want.
func hasLabels(n store.NodeRecord, want map[string]string) bool {
	for k, v := range want {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Live reports whether n heartbeated within lostAfter of now.
func Live(n store.NodeRecord, now time.Time, lostAfter time.Duration) bool {
	return now.Sub(n.HeartbeatAt) <= lostAfter
}

// Place orders the nodes a new sandbox may go to, best first: live,
// healthy, not draining, in the region, with the accelerator and labels
// asked for and room for the memory; most free memory first (ties by id, so placement is
// deterministic). None: node_full saying why.
func Place(nodes []store.NodeRecord, w Want, now time.Time, lostAfter time.Duration) ([]store.NodeRecord, error) {
	var out []store.NodeRecord
	inRegion, fits := 0, 0
	for _, n := range nodes {
		if w.Region != "" && n.Region != w.Region {
			continue
		}
		inRegion++
		if !Live(n, now, lostAfter) || !n.Healthy || n.Draining {
			continue
		}
		if (w.Accel != "" && n.Capacity.Accel != w.Accel) || !hasLabels(n, w.Labels) || (w.Node != "" && n.ID != w.Node) {
			continue
		}
		fits++
		if free := n.Capacity.FreeMiB(); free >= 0 && free < w.MemoryMiB {
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		where := "the cluster"
		if w.Region != "" {
			where = fmt.Sprintf("region %q", w.Region)
		}
		if inRegion == 0 {
			return nil, fmt.Errorf("no node serves %s: %w", where, errdefs.ErrNodeFull)
		}
		if fits == 0 && w.Node != "" {
			return nil, fmt.Errorf("the template is held by node %s only, which is not in %s with accel %q and labels %v: %w", w.Node, where, w.Accel, w.Labels, errdefs.ErrNodeFull)
		}
		if fits == 0 && (w.Accel != "" || len(w.Labels) > 0) {
			return nil, fmt.Errorf("none of the %d node(s) of %s is live with accel %q and labels %v: %w", inRegion, where, w.Accel, w.Labels, errdefs.ErrNodeFull)
		}
		return nil, fmt.Errorf("none of the %d node(s) of %s is live, not draining and has %d MiB free: %w", inRegion, where, w.MemoryMiB, errdefs.ErrNodeFull)
	}
	slices.SortStableFunc(out, func(a, b store.NodeRecord) int {
		if c := cmp.Compare(free(b), free(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// free orders unlimited nodes first.
func free(n store.NodeRecord) int {
	if f := n.Capacity.FreeMiB(); f >= 0 {
		return f
	}
	return int(^uint(0) >> 1)
}

// BuildOn is the node a template is built on (and kept): the live,
// healthy, not draining one with the most free disk (ties: the most free
// memory, then by id). None: unavailable.
func BuildOn(nodes []store.NodeRecord, now time.Time, lostAfter time.Duration) (store.NodeRecord, error) {
	var best *store.NodeRecord
	for i, n := range nodes {
		if !Live(n, now, lostAfter) || !n.Healthy || n.Draining {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(n.Capacity.DiskFreeMiB, best.Capacity.DiskFreeMiB),
			cmp.Compare(free(n), free(*best)), cmp.Compare(best.ID, n.ID)) > 0 {
			best = &nodes[i]
		}
	}
	if best == nil {
		return store.NodeRecord{}, fmt.Errorf("no live node to build the template on: %w", errdefs.ErrUnavailable)
	}
	return *best, nil
}
