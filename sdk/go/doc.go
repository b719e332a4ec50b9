// Package zeish is the public Go client of zeish. Through the control plane
// (/api/v1) it creates, lists, waits on and deletes sandboxes, pauses, stops
// and starts them, forks them while running (Client.CloneSandbox), shows
// their lineage, snapshots and restores them, and follows their state
// changes (Client.Events). Through the data plane (see Client.Connect) it
// runs commands, moves files and manages processes inside one sandbox.
//
// Calls that start a transition return at once (the server answers 202);
// pass Wait() to return once the sandbox has settled, or use
// Client.WaitForState.
//
// Errors the server returns are *APIError values that unwrap to the matching
// errdefs sentinel, so callers branch with errors.Is:
//
//	if errors.Is(err, errdefs.ErrNotFound) { … }
package zeish
