package zeish

import (
	"context"
	"net/http"
	"net/url"

	"github.com/zeish/zeish/api"
)

// Secret is an account secret as the server shows it: its name, never its value.
type Secret = api.Secret

// PutSecret stores (or replaces) the account's secret name. Requests then
// name it, e.g. BuildTemplateRequest.RegistrySecret ("user:password" or a
// bearer token). The value is never returned.
func (c *Client) PutSecret(ctx context.Context, name, value string) (Secret, error) {
	var s Secret
	err := c.call(ctx, c.control(http.MethodPut, "/public/secrets/"+url.PathEscape(name), api.PutSecretRequest{Value: value}), &s)
	return s, err
}

// ListSecrets lists the account's secrets by name.
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	var l api.SecretList
	err := c.call(ctx, c.control(http.MethodGet, "/public/secrets", nil), &l)
	return l.Secrets, err
}

// DeleteSecret deletes the account's secret name.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.call(ctx, c.control(http.MethodDelete, "/public/secrets/"+url.PathEscape(name), nil), nil)
}
