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

// Bearer sends secret as the bearer credential of every call, unary and
// streamed.
func Bearer(secret string) connect.Interceptor {
	return bearer{"Bearer " + secret}
}

type bearer struct{ value string }

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", b.value)
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", b.value)
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Authenticate checks every call a service gets, unary and streamed alike
// (connect's UnaryInterceptorFunc would let streamed calls through
// unchecked): check sees the procedure and the request's headers, and
// returns the context the call goes on with.
func Authenticate(check func(ctx context.Context, procedure string, h http.Header) (context.Context, error)) connect.Interceptor {
	return authenticate(check)
}

type authenticate func(ctx context.Context, procedure string, h http.Header) (context.Context, error)

func (a authenticate) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := a(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (a authenticate) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authenticate) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := a(ctx, conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
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

// ServerAuth refuses calls, unary and streamed, without the key as their
// bearer credential.
func (k *CallKey) ServerAuth() connect.Interceptor {
	return Authenticate(func(ctx context.Context, _ string, h http.Header) (context.Context, error) {
		if err := k.check(h.Get("Authorization")); err != nil {
			return ctx, connect.NewError(connect.CodeUnauthenticated, err)
		}
		return ctx, nil
	})
}
