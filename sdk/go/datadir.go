package zeish

import (
	"os"
	"path/filepath"
)

// DefaultAPIURL is where a zeishd started with defaults serves its API.
const DefaultAPIURL = "http://127.0.0.1:7420/api/v1"

// DefaultDataDir is where zeishd keeps its state (and admin.key) when
// ZEISH_DATA_DIR is not set: /var/lib/zeish for root, else
// $XDG_DATA_HOME/zeish or ~/.local/share/zeish. zeishd calls this same
// function, so it must stay free of anything but the standard library.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/zeish"
	}
	if xdg := os.Getenv("XDG_DATA_HOME"); xdg != "" {
		return filepath.Join(xdg, "zeish")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "zeish")
	}
	// No home at all (a bare service account): a relative folder beats failing.
	return ".zeish"
}

// DataDir is ZEISH_DATA_DIR when set, else DefaultDataDir().
func DataDir() string {
	if dir := os.Getenv("ZEISH_DATA_DIR"); dir != "" {
		return dir
	}
	return DefaultDataDir()
}

// AdminKeyPath is the file zeishd writes its first API key to, and where
// NewClientFromEnv looks for a key when ZEISH_API_KEY is not set.
func AdminKeyPath() string {
	return filepath.Join(DataDir(), "admin.key")
}
