package api

import "time"

// Browser is GET /public/sandboxes/{id}/browser: how to reach the
// sandbox's Chromium over the DevTools protocol (CDP), through the data
// plane.
type Browser struct {
	// CDPURL is the browser's WebSocket endpoint, its data-plane token in
	// the query: what chromedp's remote allocator, Puppeteer's
	// browserWSEndpoint and Playwright's connectOverCDP take.
	CDPURL string `json:"cdp_url"`
	// HTTPURL serves the DevTools HTTP endpoints (/json/version, /json/list,
	// …) with Authorization: Bearer <token>; the WebSocket URLs they list
	// lead through the data plane too.
	HTTPURL   string    `json:"http_url"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"` // of the token; an open connection outlives it
	// Version is the browser's product ("Chrome/156.0.8078.114"),
	// ProtocolVersion its CDP version ("1.3").
	Version         string `json:"version"`
	ProtocolVersion string `json:"protocol_version"`
	UserAgent       string `json:"user_agent,omitempty"`
}
