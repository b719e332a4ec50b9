package nodeapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// Each direction of the protocol has its own credential (see
// internal/cluster/identity.go): a node calls the control plane with the
// credential it got when it joined; the control plane calls a node with
// that node's call key, which the node learns when it registers.

// Bearer sends secret as the bearer credential of every call.
func Bearer(secret string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+secret)
			return next(ctx, req)
		}
	})
}

// CallKey is, on a node agent, the key the control plane calls it with.
// Until the node has registered it has none, and refuses every call.
type CallKey struct{ key atomic.Pointer[string] }

// Set stores the key the control plane handed out at registration.
func (k *CallKey) Set(key string) { k.key.Store(&key) }

// errCallKey is the answer to a call without this node's call key.
var errCallKey = errors.New("not the control plane's call key for this node")

// check reports whether an Authorization header carries the key.
func (k *CallKey) check(header string) error {
	got, ok := strings.CutPrefix(header, "Bearer ")
	want := k.key.Load()
	if !ok || want == nil || *want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(*want)) != 1 {
		return errCallKey
	}
	return nil
}

// ServerAuth refuses calls without the key as their bearer credential.
func (k *CallKey) ServerAuth() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if err := k.check(req.Header().Get("Authorization")); err != nil {
				return nil, connect.NewError(connect.CodeUnauthenticated, err)
			}
			return next(ctx, req)
		}
	})
}

// Check reports whether an HTTP request carries the key as its bearer
// credential (the forwarded routes, which are not Connect calls).
func (k *CallKey) Check(r *http.Request) error { return k.check(r.Header.Get("Authorization")) }

// ProtocolVersion is the version of proto/zeish/node/v1 this build speaks.
const ProtocolVersion = 1

// ForwardPrefix is where a node agent serves the public API's guest
// routes the control plane forwards to it (server.ForwardedHandler), on
// its call key.
const ForwardPrefix = "/node/v1/forward"
