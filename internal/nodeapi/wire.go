package nodeapi

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
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

// TemplateToWire is what crosses of t: the template as the API shows it,
// never its files' paths on the node.
func TemplateToWire(t sandbox.Template) *nodev2.Template {
	m := &nodev2.Template{Id: t.ID, Name: t.Name, AccountId: t.AccountID, Builtin: t.Builtin, State: string(t.State),
		StateReason: t.StateReason, ErrorCode: t.ErrorCode, Source: t.Source, Digest: t.Digest, ConfigDigest: t.ConfigDigest,
		Host: t.Host, Hash: t.Hash, DiskMib: int32(t.DiskMiB),
		Env: t.Env, WorkingDir: t.WorkingDir, User: t.User, StartCmd: t.StartCmd, ReadyCmd: t.ReadyCmd,
		ReadyTimeoutSeconds: int32(t.ReadyTimeoutSeconds), Cold: t.Cold, Vcpus: int32(t.VCPUs), MemoryMib: int32(t.MemoryMiB),
		LayerBytes: t.LayerBytes, Features: t.Features, CreatedAt: timeToWire(t.CreatedAt), UpdatedAt: timeToWire(t.UpdatedAt),
		KernelArgs: t.KernelArgs}
	if w := t.Warm; w != nil {
		m.Warm = &nodev2.TemplateWarm{Image: w.Image, Vcpus: int32(w.VCPUs), MemoryMib: int32(w.MemoryMiB), DiskMib: int32(w.DiskMiB), BuildMs: w.BuildMS}
	}
	return m
}

// TemplateFromWire is m in process.
func TemplateFromWire(m *nodev2.Template) sandbox.Template {
	if m == nil {
		return sandbox.Template{}
	}
	t := sandbox.Template{ID: m.Id, Name: m.Name, AccountID: m.AccountId, Builtin: m.Builtin, State: sandbox.TemplateState(m.State),
		StateReason: m.StateReason, ErrorCode: m.ErrorCode, Source: m.Source, Digest: m.Digest, ConfigDigest: m.ConfigDigest,
		Host: m.Host, Hash: m.Hash, DiskMiB: int(m.DiskMib),
		Env: m.Env, WorkingDir: m.WorkingDir, User: m.User, StartCmd: m.StartCmd, ReadyCmd: m.ReadyCmd,
		ReadyTimeoutSeconds: int(m.ReadyTimeoutSeconds), Cold: m.Cold, VCPUs: int(m.Vcpus), MemoryMiB: int(m.MemoryMib),
		LayerBytes: m.LayerBytes, Features: m.Features, CreatedAt: timeFromWire(m.CreatedAt), UpdatedAt: timeFromWire(m.UpdatedAt),
		KernelArgs: m.KernelArgs}
	if w := m.Warm; w != nil {
		t.Warm = &sandbox.TemplateWarm{Image: w.Image, VCPUs: int(w.Vcpus), MemoryMiB: int(w.MemoryMib), DiskMiB: int(w.DiskMib), BuildMS: w.BuildMs}
	}
	return t
}

// BuildSpecToWire is a build request on the wire (its upload streams after).
func BuildSpecToWire(r catalog.BuildRequest) *nodev2.BuildSpec {
	return &nodev2.BuildSpec{AccountId: r.AccountID, Name: r.Name, Transport: r.Source.Transport, Ref: r.Source.Ref,
		Username: r.Source.Username, Password: r.Source.Password, Token: r.Source.Token, DiskMib: int32(r.DiskMiB),
		StartCmd: r.StartCmd, ReadyCmd: r.ReadyCmd, ReadyTimeoutSeconds: int32(r.ReadyTimeoutSeconds), Cold: r.Cold,
		Vcpus: int32(r.VCPUs), MemoryMib: int32(r.MemoryMiB), RegistrySecret: r.RegistrySecret, Upload: r.Upload != nil}
}

// BuildSpecFromWire is m as a build request (without its upload).
func BuildSpecFromWire(m *nodev2.BuildSpec) catalog.BuildRequest {
	return catalog.BuildRequest{AccountID: m.AccountId, Name: m.Name,
		Source:  template.Source{Transport: m.Transport, Ref: m.Ref, Username: m.Username, Password: m.Password, Token: m.Token},
		DiskMiB: int(m.DiskMib), StartCmd: m.StartCmd, ReadyCmd: m.ReadyCmd, ReadyTimeoutSeconds: int(m.ReadyTimeoutSeconds),
		Cold: m.Cold, VCPUs: int(m.Vcpus), MemoryMiB: int(m.MemoryMib), RegistrySecret: m.RegistrySecret}
}

// EventToWire and EventFromWire map a build log's event.
func EventToWire(e catalog.Event) *nodev2.TemplateEvent {
	m := &nodev2.TemplateEvent{Time: timeToWire(e.Time), Type: e.Type, Message: e.Message}
	if p := e.Progress; p != nil {
		m.Progress = &nodev2.TemplateProgress{Step: p.Step, Layer: int32(p.Layer), Layers: int32(p.Layers), Bytes: p.Bytes, Total: p.Total, Message: p.Message}
	}
	if e.Template != nil {
		m.Template = TemplateToWire(*e.Template)
	}
	return m
}

func EventFromWire(m *nodev2.TemplateEvent) catalog.Event {
	e := catalog.Event{Time: timeFromWire(m.Time), Type: m.Type, Message: m.Message}
	if p := m.Progress; p != nil {
		e.Progress = &template.Progress{Step: p.Step, Layer: int(p.Layer), Layers: int(p.Layers), Bytes: p.Bytes, Total: p.Total, Message: p.Message}
	}
	if m.Template != nil {
		t := TemplateFromWire(m.Template)
		e.Template = &t
	}
	return e
}

// GitStatusToWire and GitStatusFromWire map a clone's status.
func GitStatusToWire(s api.GitStatus) *nodev2.GitStatusReply {
	m := &nodev2.GitStatusReply{Repo: s.Repo, Path: s.Path, Branch: s.Branch, Head: s.Head, Detached: s.Detached, Truncated: s.Truncated}
	for _, f := range s.Dirty {
		m.Dirty = append(m.Dirty, &nodev2.GitFile{Path: f.Path, Status: f.Status})
	}
	return m
}

func GitStatusFromWire(m *nodev2.GitStatusReply) api.GitStatus {
	s := api.GitStatus{Repo: m.Repo, Path: m.Path, Branch: m.Branch, Head: m.Head, Detached: m.Detached, Truncated: m.Truncated,
		Dirty: []api.GitFile{}}
	for _, f := range m.Dirty {
		s.Dirty = append(s.Dirty, api.GitFile{Path: f.Path, Status: f.Status})
	}
	return s
}

// DesktopToWire and DesktopFromWire map a desktop's status.
func DesktopToWire(s api.DesktopStatus) *nodev2.DesktopStatusReply {
	return &nodev2.DesktopStatusReply{Running: s.Running, Display: s.Display, Width: int32(s.Width), Height: int32(s.Height),
		Depth: int32(s.Depth), WindowManager: s.WindowManager, User: s.User}
}

func DesktopFromWire(m *nodev2.DesktopStatusReply) api.DesktopStatus {
	return api.DesktopStatus{Running: m.Running, Display: m.Display, Width: int(m.Width), Height: int(m.Height),
		Depth: int(m.Depth), WindowManager: m.WindowManager, User: m.User}
}

// StoredToWire is r as a node's store call carries it (2.3): the sandbox
// both sides know, the images it stands on, its guest's MAC and its state
// before its node was lost. Its VM's private state stays on the node (internal/nodestore),
// its secrets with the control plane (a new row carries them sealed).
func StoredToWire(r *store.SandboxRecord) *nodev2.StoredSandbox {
	if r == nil {
		return nil
	}
	return &nodev2.StoredSandbox{Sandbox: SandboxToWire(r), LostFrom: stateToWire(r.LostFrom), Layers: r.Layers,
		ResumeImage: r.ResumeImage, SealedSecrets: r.SealedSecrets(), Mac: r.MAC}
}

// StoredFromWire is m as a record, its VM's private fields empty.
func StoredFromWire(m *nodev2.StoredSandbox) (*store.SandboxRecord, error) {
	if m == nil {
		return nil, fmt.Errorf("no sandbox in the message: %w", errdefs.ErrInvalidArgument)
	}
	r, err := SandboxFromWire(m.Sandbox)
	if err != nil {
		return nil, err
	}
	if r.LostFrom, err = stateFromWire(m.LostFrom); err != nil {
		return nil, err
	}
	r.Layers, r.ResumeImage, r.MAC = m.Layers, m.ResumeImage, m.Mac
	r.SetSealedSecrets(m.SealedSecrets)
	return r, nil
}

// StoredSnapshotToWire is s with its image, as a node's store call carries it.
func StoredSnapshotToWire(s *store.SnapshotRecord) *nodev2.StoredSnapshot {
	if s == nil {
		return nil
	}
	return &nodev2.StoredSnapshot{Snapshot: SnapshotToWire(s), Image: s.Image}
}

// StoredSnapshotFromWire is m as a record.
func StoredSnapshotFromWire(m *nodev2.StoredSnapshot) (*store.SnapshotRecord, error) {
	if m == nil {
		return nil, fmt.Errorf("no snapshot in the message: %w", errdefs.ErrInvalidArgument)
	}
	s, err := SnapshotFromWire(m.Snapshot)
	if err != nil {
		return nil, err
	}
	s.Image = m.Image
	return s, nil
}

// StatesToWire and StatesFromWire map a list filter's states.
func StatesToWire(ss []sandbox.State) []nodev2.State {
	out := make([]nodev2.State, 0, len(ss))
	for _, s := range ss {
		out = append(out, stateToWire(s))
	}
	return out
}

func StatesFromWire(ws []nodev2.State) ([]sandbox.State, error) {
	out := make([]sandbox.State, 0, len(ws))
	for _, w := range ws {
		s, err := stateFromWire(w)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// APIKeyToWire is what a node's data plane knows of k (never its hash).
func APIKeyToWire(k store.APIKey) *nodev2.APIKey {
	return &nodev2.APIKey{Id: k.ID, AccountId: k.AccountID, CreatedAt: timeToWire(k.CreatedAt), RevokedAt: optTimeToWire(k.RevokedAt)}
}

// APIKeyFromWire is m in process.
func APIKeyFromWire(m *nodev2.APIKey) store.APIKey {
	return store.APIKey{ID: m.Id, AccountID: m.AccountId, CreatedAt: timeFromWire(m.CreatedAt), RevokedAt: optTimeFromWire(m.RevokedAt)}
}
