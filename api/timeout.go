package api

// TimeoutRequest is POST /public/sandboxes/{id}/timeout: the sandbox's time is
// up TimeoutSeconds from now (0 clears it: no timeout). OnTimeout, when set,
// replaces what then happens: delete, pause or stop.
type TimeoutRequest struct {
	TimeoutSeconds int    `json:"timeout_seconds"`
	OnTimeout      string `json:"on_timeout,omitempty"`
}
