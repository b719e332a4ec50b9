package qemu

import (
	"context"
	"fmt"
	"time"

	"github.com/digitalocean/go-qemu/qmp"

	"github.com/zeish/zeish/errdefs"
)

// waitStatus waits until the outgoing migration reaches want, from events
// (no poll delay) with a slower query-migrate poll as a safety net.
func waitStatus(ctx context.Context, m *monitor, events *eventLog, want string) (string, error) {
	return waitStatusPasses(ctx, m, events, want, nil)
}

// waitStatusPasses is waitStatus calling onPass (unless nil) with the
// number of every pre-copy pass QEMU starts meanwhile (1: the bulk copy).
func waitStatusPasses(ctx context.Context, m *monitor, events *eventLog, want string, onPass func(pass int) error) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		status := ""
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("migration not %s: %w", want, ctx.Err())
		case status = <-events.migration:
		case pass := <-events.passes:
			if onPass != nil {
				if err := onPass(pass); err != nil {
					return "", err
				}
			}
			continue
		case <-tick.C:
			var info migrationInfo
			if err := m.execute(ctx, "query-migrate", nil, &info); err != nil {
				return "", err
			}
			status = info.Status
			if status == "failed" {
				return status, fmt.Errorf("migration failed: %s: %w", info.Error, errdefs.ErrInternal)
			}
		}
		switch status {
		case want:
			return status, nil
		case "failed", "cancelled", "cancelling", "completed":
			return status, fmt.Errorf("migration %s, not %s: %w", status, want, errdefs.ErrInternal)
		}
	}
}

// eventLog collects a QMP session's events: migration status changes and
// pass numbers in channels, and when STOP and RESUME last happened (QEMU's
// own clock).
type eventLog struct {
	migration chan string
	passes    chan int
	times     chan stamped
	seen      map[string]time.Time
}

type stamped struct {
	name string
	at   time.Time
}

// events starts reading m's events; the go-qemu reader blocks until they
// are taken, so they are always taken, and dropped when nobody looks.
func (m *monitor) events() *eventLog {
	in, _ := m.mon.Events(context.Background())
	l := &eventLog{migration: make(chan string, 64), passes: make(chan int, 64), times: make(chan stamped, 64), seen: map[string]time.Time{}}
	go func() {
		for e := range in {
			switch e.Event {
			case "MIGRATION":
				if s, ok := e.Data["status"].(string); ok {
					select {
					case l.migration <- s:
					default:
					}
				}
			case "MIGRATION_PASS":
				if n, ok := e.Data["pass"].(float64); ok {
					select {
					case l.passes <- int(n):
					default:
					}
				}
			case "STOP", "RESUME":
				select {
				case l.times <- stamped{e.Event, eventTime(e)}:
				default:
				}
			}
		}
	}()
	return l
}

func eventTime(e qmp.Event) time.Time {
	return time.Unix(e.Timestamp.Seconds, e.Timestamp.Microseconds*1000)
}

// last returns when the event last happened, among those received so far.
func (l *eventLog) last(name string) (time.Time, bool) {
	for {
		select {
		case s := <-l.times:
			l.seen[s.name] = s.at
		default:
			at, ok := l.seen[name]
			return at, ok
		}
	}
}

// wait waits up to timeout for the event, if it was not seen yet.
func (l *eventLog) wait(name string, timeout time.Duration) (time.Time, bool) {
	if at, ok := l.last(name); ok {
		return at, true
	}
	deadline := time.After(timeout)
	for {
		select {
		case s := <-l.times:
			l.seen[s.name] = s.at
			if s.name == name {
				return s.at, true
			}
		case <-deadline:
			return time.Time{}, false
		}
	}
}
