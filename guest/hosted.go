//go:build linux

package guest

import (
	"log/slog"
	"time"
)

// NewHostedServer returns an agent that runs on the host instead of inside
// a guest: the guest side of a fake VMM (vmm/vmmfake) in tests. Configure
// changes nothing of the machine it runs on (the clock, entropy, hostname
// and network it would set are the host's); the hostname it is given goes to
// onHostname instead (nil: dropped). Exec, files and processes act on the
// host as the caller's user, so a Config with a StartCmd must not be served.
func NewHostedServer(log *slog.Logger, version string, onHostname func(string)) *Server {
	s := NewServer(log, version)
	s.sys = system{
		setTime:    func(time.Time) error { return nil },
		addEntropy: func([]byte) error { return nil },
		setHostname: func(h string) error {
			if onHostname != nil {
				onHostname(h)
			}
			return nil
		},
		setNetwork: func(Network) error { return nil },
	}
	return s
}
