package zeish

import (
	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

// Aliases of the wire and domain types, so most programs need to import only
// this package. They are the very same types the server serialises.
type (
	Sandbox               = sandbox.Sandbox
	State                 = sandbox.State
	Health                = api.Health
	CreateSandboxRequest  = api.CreateSandboxRequest
	WaitRequest           = api.WaitRequest
	Access                = api.Access
	CloneRequest          = api.CloneRequest
	CloneResponse         = api.CloneResponse
	Lineage               = api.Lineage
	LineageEntry          = api.LineageEntry
	Snapshot              = sandbox.Snapshot
	CreateSnapshotRequest = api.CreateSnapshotRequest
	RestoreResponse       = api.RestoreResponse
	Event                 = api.Event
	ExecRequest           = api.ExecRequest
	ExecResult            = guest.ExecResult
	FileInfo              = guest.FileInfo
	Process               = guest.Process
)

// Fork placements (CloneRequest.Placement) in a cluster.
const (
	PlacementParent = api.PlacementParent // every child on the parent's node, or node_full
	PlacementAny    = api.PlacementAny    // those that do not fit there on other nodes
)

// Sandbox states, as the API reports them.
const (
	StateStarting  = sandbox.StateStarting
	StateRunning   = sandbox.StateRunning
	StatePaused    = sandbox.StatePaused
	StateStopping  = sandbox.StateStopping
	StateStopped   = sandbox.StateStopped
	StateDeleting  = sandbox.StateDeleting
	StateDestroyed = sandbox.StateDestroyed
	StateError     = sandbox.StateError
)
