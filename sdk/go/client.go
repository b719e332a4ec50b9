package zeish

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
)

// Version is the SDK's version, sent in the default User-Agent.
const Version = "0.1.0"

// Client talks to one zeishd control plane. It is safe for concurrent use.
type Client struct {
	baseURL   string // ends in /api/v1 normally, no trailing slash
	apiKey    string
	http      *http.Client
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client use hc. The default has no overall timeout,
// because exec streams and file transfers last as long as they last; bound
// calls with their context instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// NewClient returns a client for the control plane at baseURL (such as
// DefaultAPIURL; empty means DefaultAPIURL) that authenticates with apiKey.
func NewClient(baseURL, apiKey string, opts ...Option) *Client {
	if baseURL == "" {
		baseURL = DefaultAPIURL
	}
	c := &Client{
		baseURL:   strings.TrimRight(baseURL, "/"),
		apiKey:    apiKey,
		http:      &http.Client{},
		userAgent: "zeish-go/" + Version,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewClientFromEnv builds a client from ZEISH_API_URL (default DefaultAPIURL)
// and ZEISH_API_KEY, falling back to the key zeishd wrote to AdminKeyPath().
// It fails with errdefs.ErrUnauthenticated when neither holds a key.
func NewClientFromEnv(opts ...Option) (*Client, error) {
	key, err := KeyFromEnv()
	if err != nil {
		return nil, err
	}
	return NewClient(os.Getenv("ZEISH_API_URL"), key, opts...), nil
}

// KeyFromEnv returns ZEISH_API_KEY, or else the contents of AdminKeyPath().
func KeyFromEnv() (string, error) {
	if key := strings.TrimSpace(os.Getenv("ZEISH_API_KEY")); key != "" {
		return key, nil
	}
	path := AdminKeyPath()
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("no API key: set ZEISH_API_KEY or check %s (%v): %w", path, err, errdefs.ErrUnauthenticated)
	}
	key := strings.TrimSpace(string(raw))
	if key == "" {
		return "", fmt.Errorf("no API key: %s is empty: %w", path, errdefs.ErrUnauthenticated)
	}
	return key, nil
}

// BaseURL is the control-plane URL the client was built with.
func (c *Client) BaseURL() string { return c.baseURL }

// request is one HTTP call. Both planes go through Client.send, so auth,
// encoding and error decoding live in one place.
type request struct {
	method string
	url    string // absolute, without query
	query  url.Values
	token  string
	json   any       // encoded as the body when non-nil
	body   io.Reader // raw body, streamed as is; exclusive with json
	// contentType of body; empty: application/octet-stream.
	contentType string
	accept      string // Accept header; empty: none
}

// control builds a control-plane request for path (relative to /api/v1).
func (c *Client) control(method, path string, in any) request {
	return request{method: method, url: c.baseURL + path, token: c.apiKey, json: in}
}

// send performs r and returns the response when its status is 2xx; any other
// status becomes an *APIError and the body is closed.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var body io.Reader
	contentType := ""
	switch {
	case r.json != nil:
		b, err := json.Marshal(r.json)
		if err != nil {
			return nil, fmt.Errorf("zeish: encoding %s %s: %w", r.method, r.url, err)
		}
		body, contentType = bytes.NewReader(b), "application/json"
	case r.body != nil:
		// NopCloser keeps the transport from closing the caller's reader
		// (an *os.File, say) behind its back.
		body, contentType = io.NopCloser(r.body), "application/octet-stream"
		if r.contentType != "" {
			contentType = r.contentType
		}
	}
	target := r.url
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return nil, fmt.Errorf("zeish: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// call performs r and decodes a JSON response into out (nil: discard it).
func (c *Client) call(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeJSON(resp.Body, out, r.method, r.url)
}

func decodeJSON(body io.Reader, out any, method, where string) error {
	if out == nil {
		// Draining lets the connection be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(body).Decode(out); err != nil {
		return fmt.Errorf("zeish: decoding response of %s %s: %w", method, where, err)
	}
	return nil
}

// rootURL is the server root, where /healthz lives: the base URL without its
// /api/v1 suffix, so a zeishd behind a path prefix still works.
func (c *Client) rootURL() string {
	if root, ok := strings.CutSuffix(c.baseURL, api.BasePath); ok {
		return root
	}
	u, err := url.Parse(c.baseURL)
	if err != nil {
		return c.baseURL
	}
	return u.Scheme + "://" + u.Host
}

// resolve turns a URL the server handed out (which may be relative to the
// server) into an absolute one.
func (c *Client) resolve(ref string) (string, error) {
	base, err := url.Parse(c.baseURL)
	if err != nil {
		return "", fmt.Errorf("zeish: base URL: %w", err)
	}
	u, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("zeish: url %q from server: %w", ref, err)
	}
	return strings.TrimRight(base.ResolveReference(u).String(), "/"), nil
}
