package zeish

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/zeish/zeish/api"
)

// Accounts, keys, usage and prices.
type (
	Account       = api.Account
	APIKey        = api.APIKey
	CreatedAPIKey = api.CreatedAPIKey
	Prices        = api.Prices
	Usage         = api.Usage
	SandboxUsage  = api.SandboxUsage
	UsageReport   = api.UsageReport
	PriceEstimate = api.PriceEstimate
)

// CreateAccount makes an account (admin keys only).
func (c *Client) CreateAccount(ctx context.Context, name string) (Account, error) {
	var a Account
	err := c.call(ctx, c.control(http.MethodPost, "/admin/accounts", api.CreateAccountRequest{Name: name}), &a)
	return a, err
}

// ListAccounts lists every account (admin keys only).
func (c *Client) ListAccounts(ctx context.Context) ([]Account, error) {
	var out api.AccountList
	err := c.call(ctx, c.control(http.MethodGet, "/admin/accounts", nil), &out)
	return out.Accounts, err
}

// CreateAPIKey makes a key for an account (admin keys only); the key is in
// the answer only.
func (c *Client) CreateAPIKey(ctx context.Context, accountID string) (CreatedAPIKey, error) {
	var k CreatedAPIKey
	err := c.call(ctx, c.control(http.MethodPost, "/admin/accounts/"+url.PathEscape(accountID)+"/keys", nil), &k)
	return k, err
}

// ListAPIKeys lists keys, of one account or ("") of all (admin keys only).
func (c *Client) ListAPIKeys(ctx context.Context, accountID string) ([]APIKey, error) {
	var out api.APIKeyList
	r := c.control(http.MethodGet, "/admin/keys", nil)
	if accountID != "" {
		r.query = url.Values{"account": {accountID}}
	}
	err := c.call(ctx, r, &out)
	return out.Keys, err
}

// RevokeAPIKey revokes a key by its id (admin keys only).
func (c *Client) RevokeAPIKey(ctx context.Context, keyID string) (APIKey, error) {
	var k APIKey
	err := c.call(ctx, c.control(http.MethodDelete, "/admin/keys/"+url.PathEscape(keyID), nil), &k)
	return k, err
}

// Usage reports the account's usage within [from, to); zero times mean
// since the first sandbox and until now.
func (c *Client) Usage(ctx context.Context, from, to time.Time) (UsageReport, error) {
	var out UsageReport
	r := c.control(http.MethodGet, "/public/usage", nil)
	r.query = url.Values{}
	if !from.IsZero() {
		r.query.Set("from", from.UTC().Format(time.RFC3339))
	}
	if !to.IsZero() {
		r.query.Set("to", to.UTC().Format(time.RFC3339))
	}
	err := c.call(ctx, r, &out)
	return out, err
}

// EstimateRequest is what EstimatePrice prices; zero fields take the
// server's defaults (1 sandbox, the small size, 60 minutes).
type EstimateRequest struct {
	Sandboxes int
	Size      string
	VCPUs     int
	MemoryMiB int
	DiskMiB   int
	Minutes   int
}

// EstimatePrice is the pricing calculator.
func (c *Client) EstimatePrice(ctx context.Context, req EstimateRequest) (PriceEstimate, error) {
	var out PriceEstimate
	r := c.control(http.MethodGet, "/public/pricing/estimate", nil)
	r.query = url.Values{}
	for _, p := range []struct {
		name string
		v    int
	}{{"sandboxes", req.Sandboxes}, {"vcpus", req.VCPUs}, {"memory_mib", req.MemoryMiB}, {"disk_mib", req.DiskMiB}, {"minutes", req.Minutes}} {
		if p.v != 0 {
			r.query.Set(p.name, strconv.Itoa(p.v))
		}
	}
	if req.Size != "" {
		r.query.Set("size", req.Size)
	}
	err := c.call(ctx, r, &out)
	return out, err
}
