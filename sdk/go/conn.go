package zeish

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// SandboxConn is a data-plane connection to one sandbox: exec, files and
// processes. It holds a short-lived access token and renews it shortly before
// it expires, so a SandboxConn can be kept for as long as the sandbox lives.
// It is safe for concurrent use.
type SandboxConn struct {
	client *Client
	id     string
	ttl    time.Duration // asked for on every renewal; 0: server default

	mu       sync.Mutex
	access   Access
	obtained time.Time
}

// ConnectOption configures Connect.
type ConnectOption func(*SandboxConn)

// WithTokenTTL asks for tokens valid for ttl instead of the server default.
func WithTokenTTL(ttl time.Duration) ConnectOption {
	return func(sc *SandboxConn) { sc.ttl = ttl }
}

// Connect opens a data-plane connection to sandbox id. It fetches a first
// token right away, so an unknown sandbox or a bad API key fails here.
func (c *Client) Connect(ctx context.Context, id string, opts ...ConnectOption) (*SandboxConn, error) {
	sc := &SandboxConn{client: c, id: id}
	for _, o := range opts {
		o(sc)
	}
	if _, err := sc.token(ctx, true); err != nil {
		return nil, err
	}
	return sc, nil
}

// ID is the sandbox this connection reaches.
func (sc *SandboxConn) ID() string { return sc.id }

// refreshMargin is how long before expiry a token is renewed: a minute, or a
// quarter of its lifetime for short-lived tokens, so a call never starts with
// a token about to lapse mid-flight.
func refreshMargin(lifetime time.Duration) time.Duration {
	return min(time.Minute, lifetime/4)
}

// now is replaced in tests to step over token lifetimes without sleeping.
var now = time.Now

// token returns a current access (URL and token), renewing it when force is
// set or it is close to expiry.
func (sc *SandboxConn) token(ctx context.Context, force bool) (Access, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !force && sc.access.Token != "" {
		lifetime := sc.access.ExpiresAt.Sub(sc.obtained)
		if now().Before(sc.access.ExpiresAt.Add(-refreshMargin(lifetime))) {
			return sc.access, nil
		}
	}
	acc, err := sc.client.Access(ctx, sc.id, sc.ttl)
	if err != nil {
		return Access{}, err
	}
	sc.access, sc.obtained = acc, now()
	return acc, nil
}

// send performs a data-plane request to path (relative to the sandbox's data
// URL). If the server says the token expired anyway (clock skew between
// client and server), it renews the token and tries once more, but only when
// the body can be sent again: a streamed upload cannot be replayed.
func (sc *SandboxConn) send(ctx context.Context, r request, path string) (io.ReadCloser, error) {
	for attempt := 0; ; attempt++ {
		acc, err := sc.token(ctx, attempt > 0)
		if err != nil {
			return nil, err
		}
		r.url, r.token = acc.URL+path, acc.Token
		resp, err := sc.client.send(ctx, r)
		if err == nil {
			return resp.Body, nil
		}
		if attempt > 0 || r.body != nil || !errors.Is(err, errdefs.ErrTokenExpired) {
			return nil, err
		}
	}
}

// call is send plus JSON decoding, as Client.call.
func (sc *SandboxConn) call(ctx context.Context, r request, path string, out any) error {
	body, err := sc.send(ctx, r, path)
	if err != nil {
		return err
	}
	defer body.Close()
	return decodeJSON(body, out, r.method, path)
}
