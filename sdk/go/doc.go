// Package zeish is the public Go client of zeish: it creates, lists, waits on
// and deletes sandboxes through the control plane (/api/v1), and runs
// commands, moves files and manages processes inside one sandbox through the
// data plane (see Client.Connect).
//
// Errors the server returns are *APIError values that unwrap to the matching
// errdefs sentinel, so callers branch with errors.Is:
//
//	if errors.Is(err, errdefs.ErrNotFound) { … }
package zeish
