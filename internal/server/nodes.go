package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// Cluster is what the admin API needs of a control plane with node agents
// (the cluster package's Router); nil on a single zeishd.
type Cluster interface {
	// Nodes lists the registered nodes, memory committed as the store has it.
	Nodes(ctx context.Context) ([]store.NodeRecord, error)
	// Live reports whether n heartbeated recently enough.
	Live(n store.NodeRecord) bool
	// Drain sets whether node id takes new sandboxes.
	Drain(ctx context.Context, id string, drain bool) (store.NodeRecord, error)
}

func (s *Server) nodeView(n store.NodeRecord) api.Node {
	labels := n.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	c := n.Capacity
	return api.Node{ID: n.ID, Region: n.Region, Labels: labels, URL: n.URL, Version: n.Version, Healthy: n.Healthy,
		Live: s.opts.Cluster.Live(n), Draining: n.Draining, MemoryMiB: c.MemoryBudgetMiB, CommittedMiB: c.MemoryCommittedMiB,
		ImageRAMMiB: c.ImageRAMMiB, FreeMiB: c.FreeMiB(), VCPUs: c.VCPUs, DiskFreeMiB: c.DiskFreeMiB, Accel: c.Accel,
		RegisteredAt: n.RegisteredAt, HeartbeatAt: n.HeartbeatAt}
}

func (s *Server) noCluster(r *http.Request) error {
	return fmt.Errorf("this zeishd runs its sandboxes itself; it has no node agents (%s): %w", r.URL.Path, errdefs.ErrNotFound)
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if s.opts.Cluster == nil {
		writeError(w, r, s.noCluster(r))
		return
	}
	nodes, err := s.opts.Cluster.Nodes(r.Context())
	if err != nil {
		writeError(w, r, storeErr(err))
		return
	}
	out := api.NodeList{Nodes: []api.Node{}}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, s.nodeView(n))
	}
	writeJSON(w, http.StatusOK, out)
}

// drainNode stops (drain) or resumes (undrain) placements on a node; its
// sandboxes keep running either way.
func (s *Server) drainNode(drain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Cluster == nil {
			writeError(w, r, s.noCluster(r))
			return
		}
		n, err := s.opts.Cluster.Drain(r.Context(), r.PathValue("id"), drain)
		if err != nil {
			writeError(w, r, storeErr(err))
			return
		}
		s.log.Info("node drain", "node", n.ID, "draining", drain)
		writeJSON(w, http.StatusOK, s.nodeView(n))
	}
}

// TokenKey is the data dir's data-plane token key (made on first use): a
// control plane hands it to its node agents at registration.
func TokenKey(dataDir string) ([]byte, error) {
	t, err := loadTokenKey(dataDir)
	if err != nil {
		return nil, err
	}
	return t.key, nil
}
