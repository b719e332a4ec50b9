// Package nodeapi is the control plane ↔ node protocol
// (proto/zeish/node/v2): Server serves a local node's operations and
// RemoteNode calls them, over Connect on the node's call key, with typed
// messages mapped to the in-process types in wire.go and the version
// agreed at registration (version.go); Delivered keeps, on a node, the
// secrets each call brings. The Control service (join, registration,
// heartbeats) is served by the cluster package.
package nodeapi

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
)

// codeKey is the error metadata that carries the stable zeish code.
const codeKey = "zeish-code"

// ToWire turns err into a Connect error carrying errdefs' code, so the
// caller gets the same typed error back (FromWire).
func ToWire(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Meta().Get(codeKey) != "" {
		return err
	}
	e := errdefs.Of(err)
	w := connect.NewError(connectCode(e.Class), errors.New(err.Error()))
	w.Meta().Set(codeKey, e.Code)
	return w
}

// FromWire turns a Connect error back into a zeish one: the node's
// message, unwrapping to the errdefs sentinel of its code. A call that
// never reached the node (refused, timed out, no route) is unavailable.
func FromWire(node string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("node %s: %w: %w", node, errdefs.ErrUnavailable, err)
	}
	if e := errdefs.ByCode(ce.Meta().Get(codeKey)); e != nil {
		return &RemoteError{Node: node, Msg: ce.Message(), Code: e}
	}
	switch ce.Code() {
	case connect.CodeDeadlineExceeded:
		return fmt.Errorf("node %s: %w: %w", node, errdefs.ErrTimeout, err)
	case connect.CodeUnauthenticated:
		return fmt.Errorf("node %s refused the call (its call key, or this node's credential): %w: %w", node, errdefs.ErrInternal, err)
	}
	return fmt.Errorf("node %s: %w: %w", node, errdefs.ErrUnavailable, err)
}

// RemoteError is an error a node answered with: its words, its code.
type RemoteError struct {
	Node string
	Msg  string
	Code *errdefs.Error
}

func (e *RemoteError) Error() string { return e.Msg }
func (e *RemoteError) Unwrap() error { return e.Code }

// connectCode is the Connect code of a zeish error class, from errdefs's
// table (for generic Connect clients; zeish's own read the zeish-code
// metadata).
func connectCode(c errdefs.Class) connect.Code { return connect.Code(errdefs.WireOf(c).RPC) }

// unreadable is an answer of node that this side cannot read.
func unreadable(node string, err error) error {
	return fmt.Errorf("node %s answered what this control plane cannot read: %v: %w", node, err, errdefs.ErrInternal)
}
