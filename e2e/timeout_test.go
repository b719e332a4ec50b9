package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestSandboxTimeout: a sandbox created with a timeout is deleted when it
// passes; one whose timeout says pause is paused instead, its deadline
// cleared, and runs again on resume; the deadline can be moved and cleared;
// bad timeouts are refused and change nothing.
func TestSandboxTimeout(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client

	for _, bad := range []api.CreateSandboxRequest{
		{TimeoutSeconds: -1},
		{TimeoutSeconds: 31 * 24 * 3600},
		{TimeoutSeconds: 5, OnTimeout: "explode"},
	} {
		if _, err := c.CreateSandbox(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("create %+v: %v, want invalid_argument", bad, err)
		}
	}
	if list, _ := c.ListSandboxes(ctx, zeish.ListOptions{}); len(list) != 0 {
		t.Fatalf("refused creates made sandboxes: %+v", list)
	}

	// Deleted on time: a long first deadline, shortened while it runs.
	doomed, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMiB: 256, TimeoutSeconds: 3600}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	if doomed.TimeoutAt == nil || doomed.OnTimeout != sandbox.OnTimeoutDelete {
		t.Fatalf("created with a timeout: %+v", doomed)
	}
	if _, err := c.SetTimeout(ctx, doomed.ID, time.Second, "bogus"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("set timeout with a bad action: %v, want invalid_argument", err)
	}
	moved, err := c.SetTimeout(ctx, doomed.ID, time.Second, "")
	if err != nil || moved.TimeoutAt == nil || !moved.TimeoutAt.Before(*doomed.TimeoutAt) {
		t.Fatalf("shorten: %+v %v", moved, err)
	}
	gone, err := c.WaitForState(ctx, doomed.ID, sandbox.StateDestroyed)
	if err != nil || gone.State != sandbox.StateDestroyed {
		t.Fatalf("after its timeout: %+v %v, want destroyed", gone, err)
	}
	if _, err := c.SetTimeout(ctx, doomed.ID, time.Minute, ""); !errors.Is(err, errdefs.ErrInvalidState) {
		t.Fatalf("timeout of a destroyed sandbox: %v, want invalid_state", err)
	}

	// Paused on time, then it runs with no deadline until one is set again.
	sleepy, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMiB: 256, TimeoutSeconds: 2, OnTimeout: sandbox.OnTimeoutPause}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	paused, err := c.WaitForState(ctx, sleepy.ID, sandbox.StatePaused)
	if err != nil {
		t.Fatalf("after its timeout: %+v %v, want paused", paused, err)
	}
	paused, err = c.GetSandbox(ctx, sleepy.ID)
	if err != nil || paused.TimeoutAt != nil || paused.OnTimeout != sandbox.OnTimeoutPause {
		t.Fatalf("paused by its timeout: %+v %v, want its deadline cleared", paused, err)
	}
	if _, err := c.ResumeSandbox(ctx, sleepy.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetTimeout(ctx, sleepy.ID, time.Hour, sandbox.OnTimeoutDelete); err != nil {
		t.Fatal(err)
	}
	cleared, err := c.SetTimeout(ctx, sleepy.ID, 0, "")
	if err != nil || cleared.TimeoutAt != nil || cleared.State != sandbox.StateRunning {
		t.Fatalf("cleared: %+v %v", cleared, err)
	}
	if _, err := c.SetTimeout(ctx, "sbx_doesnotexist0000000", time.Minute, ""); !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("timeout of an unknown sandbox: %v, want not_found", err)
	}
}
