package sandbox

import "slices"

// The other rules that hang on a sandbox's state. Packages that filter
// sandboxes by state (quotas, the memory budget, billing, the watchers)
// take the sets from here, so a new state is placed once.

// SlotStates hold one of the account's running slots (docs/quotas.md,
// Quotas): a paused sandbox still holds its memory, a stopped one
// uses no compute.
var SlotStates = []State{StateStarting, StateRunning, StatePaused}

// MemoryStates have guest memory promised on their host: the node's memory
// budget (node_full) counts them. A stopping sandbox still holds its RAM
// until its suspend is written.
var MemoryStates = []State{StateStarting, StateRunning, StatePaused, StateStopping}

// LiveStates are every state but destroyed: what a sandbox that exists is in
// (names are unique among these; metrics count them).
var LiveStates = slices.DeleteFunc(slices.Clone(States), func(s State) bool { return !s.Live() })

// Live reports whether a sandbox in state s exists: every state but
// destroyed, which is history (kept for lineage and billing).
func (s State) Live() bool { return s != StateDestroyed }

// TimeoutStates are the settled states a timeout acts on: a sandbox in
// transition is left until it settles, one in error until it is deleted.
var TimeoutStates = []State{StateRunning, StatePaused, StateStopped}

// Billed reports whether compute is billed in state s (docs/quotas.md,
// Billing: compute while running).
func (s State) Billed() bool { return s == StateRunning }

// Configured reports whether a guest in state s has been given its identity
// (hostname, network, env, secrets): every boot, start, restore and fork
// hands it over before running. A restarted node re-attaches to such a guest
// as it is; configuring it again would also replace an agent session a
// data-plane request had just opened.
func (s State) Configured() bool { return s == StateRunning }

// Deleted reports whether s is a delete begun or done: the sandbox's
// tokens, ports and links are gone with it.
func (s State) Deleted() bool { return s == StateDeleting || s == StateDestroyed }

// WaitOver reports whether a waiter for want (empty: until the sandbox
// settles) stops at state cur: it got there, or it never will (error and
// destroyed are ends no call leaves but delete).
func WaitOver(cur, want State) bool {
	switch {
	case want == "":
		return cur.Settled()
	case cur == want:
		return true
	}
	return cur == StateError || cur == StateDestroyed
}
