// Package version is zeish's version, set at build time with
// -ldflags "-X github.com/zeish/zeish/internal/version.Version=…".
package version

// Version of this build.
var Version = "dev"
