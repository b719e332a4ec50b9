package mcp

import (
	"context"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

type BrowserInput struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"sandbox created or forked with browser: true (its id sbx_… or its name)"`
	TTLSeconds int    `json:"ttl_seconds,omitempty" jsonschema:"lifetime of the URL's token in seconds (default 900, at most 3600); an open connection outlives it"`
}

type BrowserInfo struct {
	CDPURL          string `json:"cdp_url" jsonschema:"the browser's DevTools WebSocket URL, token included: connect chromedp, Puppeteer (browserWSEndpoint) or Playwright (connectOverCDP) to it"`
	HTTPURL         string `json:"http_url" jsonschema:"base of the DevTools HTTP endpoints (/json/version, /json/list); send the token as Authorization: Bearer"`
	Token           string `json:"token" jsonschema:"the data-plane token in cdp_url"`
	ExpiresAt       string `json:"expires_at" jsonschema:"when the token ends (RFC 3339)"`
	Version         string `json:"version" jsonschema:"the browser, e.g. Chrome/156.0.8078.114"`
	ProtocolVersion string `json:"protocol_version" jsonschema:"the DevTools protocol version"`
}

func (t *tools) addBrowserTool(s *sdkmcp.Server) {
	add(s, &sdkmcp.Tool{
		Name:  "browser_url",
		Title: "Browser DevTools URL",
		Description: "Get the DevTools (CDP) WebSocket URL of a sandbox's headless Chromium, to drive it with a CDP client " +
			"(chromedp, Puppeteer, Playwright). The sandbox must have been created, or forked, with browser: true on a " +
			"template that carries a browser (the built-in desktop template). A fork of the sandbox keeps the browser's pages, " +
			"cookies and DOM.",
		Annotations: &sdkmcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.browserURL)
}

func (t *tools) browserURL(ctx context.Context, in BrowserInput) (BrowserInfo, error) {
	b, err := t.client.Browser(ctx, in.SandboxID, time.Duration(in.TTLSeconds)*time.Second)
	if err != nil {
		return BrowserInfo{}, err
	}
	return BrowserInfo{CDPURL: b.CDPURL, HTTPURL: b.HTTPURL, Token: b.Token, ExpiresAt: b.ExpiresAt.Format(time.RFC3339),
		Version: b.Version, ProtocolVersion: b.ProtocolVersion}, nil
}
