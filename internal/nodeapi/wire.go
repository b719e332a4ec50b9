package nodeapi

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The one mapping between the wire's messages (proto/zeish/node/v2) and
// the types the two sides use in process (store's records, sandbox's
// domain types). A field of a record does not cross by accident: a new
// one is added here, to the proto (a new minor version) and to
// TestWireCarriesEverySharedField, or is listed there as the node's own.

var statesToWire = map[sandbox.State]nodev2.State{
	sandbox.StateStarting:  nodev2.State_STATE_STARTING,
	sandbox.StateRunning:   nodev2.State_STATE_RUNNING,
	sandbox.StatePaused:    nodev2.State_STATE_PAUSED,
	sandbox.StateStopping:  nodev2.State_STATE_STOPPING,
	sandbox.StateStopped:   nodev2.State_STATE_STOPPED,
	sandbox.StateDeleting:  nodev2.State_STATE_DELETING,
	sandbox.StateDestroyed: nodev2.State_STATE_DESTROYED,
	sandbox.StateError:     nodev2.State_STATE_ERROR,
}

var statesFromWire = func() map[nodev2.State]sandbox.State {
	m := map[nodev2.State]sandbox.State{}
	for s, w := range statesToWire {
		m[w] = s
	}
	return m
}()

func stateToWire(s sandbox.State) nodev2.State { return statesToWire[s] } // "" is unspecified

func stateFromWire(w nodev2.State) (sandbox.State, error) {
	if w == nodev2.State_STATE_UNSPECIFIED {
		return "", nil
	}
	s, ok := statesFromWire[w]
	if !ok {
		return "", fmt.Errorf("sandbox state %d is not one this side knows: %w", w, errdefs.ErrInvalidArgument)
	}
	return s, nil
}

func timeToWire(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromWire(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime().UTC()
}

func optTimeToWire(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func optTimeFromWire(t *timestamppb.Timestamp) *time.Time {
	if t == nil {
		return nil
	}
	v := t.AsTime().UTC()
	return &v
}

func ints32(in []int) []int32 {
	if in == nil {
		return nil
	}
	out := make([]int32, len(in))
	for i, v := range in {
		out[i] = int32(v)
	}
	return out
}

func ints(in []int32) []int {
	if in == nil {
		return nil
	}
	out := make([]int, len(in))
	for i, v := range in {
		out[i] = int(v)
	}
	return out
}

// nonNil keeps a map the API shows as {} from crossing back as null.
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func strs(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// NetworkToWire is p on the wire (nil: none).
func NetworkToWire(p *sandbox.Network) *nodev2.Network {
	if p == nil {
		return nil
	}
	return &nodev2.Network{Enabled: p.Enabled, Egress: string(p.Egress), Allow: p.Allow, Deny: p.Deny,
		RateBytesPerSecond: p.RateBytes, RatePacketsPerSecond: p.RatePackets}
}

// NetworkFromWire is m in process (nil: none).
func NetworkFromWire(m *nodev2.Network) *sandbox.Network {
	if m == nil {
		return nil
	}
	return &sandbox.Network{Enabled: m.Enabled, Egress: sandbox.Egress(m.Egress), Allow: strs(m.Allow), Deny: strs(m.Deny),
		RateBytes: m.RateBytesPerSecond, RatePackets: m.RatePacketsPerSecond}
}

// SandboxToWire is what crosses of r: the sandbox as both sides know it,
// never its VM's private state nor its secrets (which travel on their own).
func SandboxToWire(r *store.SandboxRecord) *nodev2.Sandbox {
	if r == nil {
		return nil
	}
	s := r.Sandbox
	m := &nodev2.Sandbox{Id: s.ID, Name: s.Name, AccountId: s.AccountID, State: stateToWire(s.State), StateReason: s.StateReason,
		ErrorCode: s.ErrorCode, ErrorMessage: s.ErrorMessage, Template: s.Template,
		Vcpus: int32(s.VCPUs), MemoryMib: int32(s.MemoryMiB), DiskMib: int32(s.DiskMiB),
		Region: s.Region, Host: s.Host, Hostname: s.Hostname, Address: s.Address, Network: NetworkToWire(s.Network),
		PublicPorts: ints32(s.PublicPorts), Accel: s.Accel, NodeLabels: s.NodeLabels, ParentId: s.ParentID, Env: s.Env,
		GitRepo: s.GitRepo, GitBranch: s.GitBranch, PrNumber: int32(s.PRNumber), MaxCostMicros: s.MaxCostMicros,
		Browser: s.Browser, Desktop: s.Desktop, Metadata: s.Metadata, CostMicros: s.CostMicros,
		CreatedAt: timeToWire(s.CreatedAt), UpdatedAt: timeToWire(s.UpdatedAt), DestroyedAt: optTimeToWire(s.DestroyedAt),
		TimeoutAt: optTimeToWire(s.TimeoutAt), OnTimeout: s.OnTimeout,
		GitPath: s.GitPath, GitPrRef: s.GitPRRef, GitTokenSecret: s.GitTokenSecret,
		NetIn: r.NetIn, NetOut: r.NetOut}
	for _, iv := range r.Running {
		m.Running = append(m.Running, &nodev2.Interval{Start: timeToWire(iv.Start), End: optTimeToWire(iv.End)})
	}
	return m
}

// SandboxFromWire is m as a record: what crossed, the node's private
// fields empty.
func SandboxFromWire(m *nodev2.Sandbox) (*store.SandboxRecord, error) {
	if m == nil {
		return nil, fmt.Errorf("no sandbox in the message: %w", errdefs.ErrInvalidArgument)
	}
	state, err := stateFromWire(m.State)
	if err != nil {
		return nil, err
	}
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: m.Id, Name: m.Name, AccountID: m.AccountId, State: state,
		StateReason: m.StateReason, ErrorCode: m.ErrorCode, ErrorMessage: m.ErrorMessage, Template: m.Template,
		VCPUs: int(m.Vcpus), MemoryMiB: int(m.MemoryMib), DiskMiB: int(m.DiskMib),
		Region: m.Region, Host: m.Host, Hostname: m.Hostname, Address: m.Address, Network: NetworkFromWire(m.Network),
		PublicPorts: ints(m.PublicPorts), Accel: m.Accel, NodeLabels: m.NodeLabels, ParentID: m.ParentId, Env: nonNil(m.Env),
		GitRepo: m.GitRepo, GitBranch: m.GitBranch, PRNumber: int(m.PrNumber), MaxCostMicros: m.MaxCostMicros,
		Browser: m.Browser, Desktop: m.Desktop, Metadata: nonNil(m.Metadata), CostMicros: m.CostMicros,
		CreatedAt: timeFromWire(m.CreatedAt), UpdatedAt: timeFromWire(m.UpdatedAt), DestroyedAt: optTimeFromWire(m.DestroyedAt),
		TimeoutAt: optTimeFromWire(m.TimeoutAt), OnTimeout: m.OnTimeout,
		GitPath: m.GitPath, GitPRRef: m.GitPrRef, GitTokenSecret: m.GitTokenSecret},
		NetIn: m.NetIn, NetOut: m.NetOut}
	for _, iv := range m.Running {
		r.Running = append(r.Running, store.Interval{Start: timeFromWire(iv.Start), End: optTimeFromWire(iv.End)})
	}
	return r, nil
}

// SnapshotToWire is what crosses of s (not the node's image id).
func SnapshotToWire(s *store.SnapshotRecord) *nodev2.Snapshot {
	if s == nil {
		return nil
	}
	return &nodev2.Snapshot{Id: s.ID, SandboxId: s.SandboxID, AccountId: s.AccountID, Name: s.Name,
		CreatedAt: timeToWire(s.CreatedAt), SizeBytes: s.SizeBytes, IncludeRam: s.IncludeRAM}
}

// SnapshotFromWire is m as a record.
func SnapshotFromWire(m *nodev2.Snapshot) (*store.SnapshotRecord, error) {
	if m == nil {
		return nil, fmt.Errorf("no snapshot in the message: %w", errdefs.ErrInvalidArgument)
	}
	return &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: m.Id, SandboxID: m.SandboxId, AccountID: m.AccountId, Name: m.Name,
		CreatedAt: timeFromWire(m.CreatedAt), SizeBytes: m.SizeBytes, IncludeRAM: m.IncludeRam}}, nil
}

// CapacityToWire and CapacityFromWire map what a node reports.
func CapacityToWire(c store.NodeCapacity) *nodev2.Capacity {
	return &nodev2.Capacity{MemoryBudgetMib: int64(c.MemoryBudgetMiB), MemoryCommittedMib: int64(c.MemoryCommittedMiB),
		ImageRamMib: int64(c.ImageRAMMiB), Vcpus: int32(c.VCPUs), DiskFreeMib: int64(c.DiskFreeMiB), Accel: c.Accel, Vmm: c.VMM,
		ImageDiskMib: int64(c.ImageDiskMiB)}
}

func CapacityFromWire(c *nodev2.Capacity) store.NodeCapacity {
	if c == nil {
		return store.NodeCapacity{}
	}
	return store.NodeCapacity{MemoryBudgetMiB: int(c.MemoryBudgetMib), MemoryCommittedMiB: int(c.MemoryCommittedMib),
		ImageRAMMiB: int(c.ImageRamMib), VCPUs: int(c.Vcpus), DiskFreeMiB: int(c.DiskFreeMib), Accel: c.Accel, VMM: c.Vmm,
		ImageDiskMiB: int(c.ImageDiskMib)}
}
