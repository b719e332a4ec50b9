package api

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// API keys are "zk_" and the URL-safe base64 of 24 random bytes. E2B's SDKs
// before 2.46 refuse a key that is not "e2b_" and hex digits, so every key
// has an E2B form too: "e2b_" and the hex of the same 24 bytes. Either
// form is the same key (same id, same account, revoked together); the
// server reads an E2B form as the zeish key it spells.

const (
	// KeyPrefix starts every zeish API key.
	KeyPrefix = "zk_"
	// E2BKeyPrefix starts a key's E2B form.
	E2BKeyPrefix = "e2b_"
	keyBytes     = 24
)

// E2BKey is the E2B form of a zeish API key.
func E2BKey(key string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(key, KeyPrefix))
	if !strings.HasPrefix(key, KeyPrefix) || err != nil || len(raw) != keyBytes {
		return "", fmt.Errorf("%q is not a zeish API key (zk_…)", redactKey(key))
	}
	return E2BKeyPrefix + hex.EncodeToString(raw), nil
}

// ZeishKey is the zeish API key an E2B form spells; ok is false for any
// other string (a zeish key included), which is then used as it is.
func ZeishKey(e2bKey string) (key string, ok bool) {
	h, found := strings.CutPrefix(e2bKey, E2BKeyPrefix)
	if !found || len(h) != 2*keyBytes || strings.ToLower(h) != h {
		return "", false
	}
	raw, err := hex.DecodeString(h)
	if err != nil {
		return "", false
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(raw), true
}

// redactKey keeps enough of a key to recognise it in an error.
func redactKey(key string) string {
	if len(key) > 8 {
		return key[:8] + "…"
	}
	return key
}
