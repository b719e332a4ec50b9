package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
)

func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", fmt.Errorf("missing Authorization: Bearer header: %w", errdefs.ErrUnauthenticated)
	}
	return tok, nil
}

// token is the request's bearer token, "" when it has none.
func token(r *http.Request) string {
	tok, _ := bearer(r)
	return tok
}

type callerKey struct{}

// callerFrom is who made the request (withAccount, withSession, a
// forwarded request).
func callerFrom(ctx context.Context) control.Caller {
	c, _ := ctx.Value(callerKey{}).(control.Caller)
	return c
}

func withCaller(r *http.Request, c control.Caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}

// withAccount authenticates an API key and puts its caller in the context.
func (s *Server) withAccount(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Value(callerKey{}).(control.Caller); ok {
			h(w, r) // a console request, authenticated by its session (console.go)
			return
		}
		key, err := bearer(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		c, err := s.ctl.Authenticate(r.Context(), key)
		if err != nil {
			writeError(w, r, err)
			return
		}
		h(w, withCaller(r, c))
	}
}
