package control

import (
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
)

func TestResolveTimeout(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		seconds int
		action  string
		at      time.Duration // 0: no deadline
		err     error
	}{
		{seconds: 0},
		{seconds: 0, action: "pause"},
		{seconds: 60, at: time.Minute},
		{seconds: 60, action: "stop", at: time.Minute},
		{seconds: 30 * 24 * 3600, at: 30 * 24 * time.Hour},
		{seconds: -1, err: errdefs.ErrInvalidArgument},
		{seconds: 30*24*3600 + 1, err: errdefs.ErrInvalidArgument},
		{seconds: 5, action: "kill", err: errdefs.ErrInvalidArgument},
	} {
		at, action, err := resolveTimeout(tc.seconds, tc.action, now)
		if !errors.Is(err, tc.err) || (err == nil && action != tc.action) {
			t.Errorf("%d %q: %v %q, want %v", tc.seconds, tc.action, err, action, tc.err)
			continue
		}
		switch {
		case err != nil:
		case tc.at == 0 && at != nil:
			t.Errorf("%d: deadline %v, want none", tc.seconds, at)
		case tc.at != 0 && (at == nil || !at.Equal(now.Add(tc.at))):
			t.Errorf("%d: deadline %v, want %v", tc.seconds, at, now.Add(tc.at))
		}
	}
}
