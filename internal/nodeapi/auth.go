package nodeapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// Token authenticates both directions of the protocol: the control plane
// and every node agent share it (ZEISH_NODE_TOKEN).
type Token string

// ServerAuth refuses calls without the token as their bearer credential.
func (t Token) ServerAuth() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			got, ok := strings.CutPrefix(req.Header().Get("Authorization"), "Bearer ")
			if !ok || t == "" || subtle.ConstantTimeCompare([]byte(got), []byte(t)) != 1 {
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("node token missing or wrong"))
			}
			return next(ctx, req)
		}
	})
}

// ClientAuth sends the token with every call.
func (t Token) ClientAuth() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+string(t))
			return next(ctx, req)
		}
	})
}

// ProtocolVersion is the version of proto/zeish/node/v1 this build speaks.
const ProtocolVersion = 1

// ForwardPrefix is where a node agent serves the public API's guest
// routes the control plane forwards to it (server.ForwardedHandler), on
// the node token.
const ForwardPrefix = "/node/v1/forward"

// Check reports whether an HTTP request carries the token as its bearer
// credential (the forwarded routes, which are not Connect calls).
func (t Token) Check(r *http.Request) error {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || t == "" || subtle.ConstantTimeCompare([]byte(got), []byte(t)) != 1 {
		return errors.New("node token missing or wrong")
	}
	return nil
}
