package e2e

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestQuotas proves the plan's limits on dedicated servers with tiny ones,
// without booting a VM: refusals come at the API edge, before anything is
// made (a create that passes is deleted while it still starts).
func TestQuotas(t *testing.T) {
	const sbx = api.BasePath + "/public/sandboxes"
	const body = `{"memory_mib":256}`
	// createThenDelete makes one sandbox and deletes it at once.
	createThenDelete := func(t *testing.T, s *server) {
		var sb sandbox.Sandbox
		if st := s.do(t, "POST", sbx, s.key, body, &sb); st != 202 {
			t.Fatalf("first create: %d", st)
		}
		if _, err := s.client.DeleteSandbox(ctxFor(t, 2*time.Minute), sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	}
	liveCount := func(t *testing.T, s *server) int {
		var list api.SandboxList
		s.do(t, "GET", sbx+"?include_destroyed=true", s.key, nil, &list)
		return len(list.Sandboxes)
	}
	t.Run("no running slot", func(t *testing.T) {
		s := startServer(t, "ZEISH_PLAN_RUNNING_SLOTS=0")
		st, _, b := s.raw(t, "POST", sbx, s.key, body)
		if st != 409 || errorCode(b) != "running_slots_full" {
			t.Fatalf("create: %d %s, want 409 running_slots_full", st, b)
		}
		if n := liveCount(t, s); n != 0 {
			t.Fatalf("a refused create made %d sandboxes", n)
		}
	})
	t.Run("rate limit", func(t *testing.T) {
		s := startServer(t, "ZEISH_PLAN_CREATES_PER_MINUTE=1")
		createThenDelete(t, s)
		st, h, b := s.raw(t, "POST", sbx, s.key, body)
		retry, _ := strconv.Atoi(h.Get("Retry-After"))
		if st != 429 || errorCode(b) != "rate_limited" || retry < 1 || retry > 60 {
			t.Fatalf("second create: %d Retry-After %q %s, want 429 rate_limited within 60 s", st, h.Get("Retry-After"), b)
		}
		if n := liveCount(t, s); n != 1 {
			t.Fatalf("%d sandboxes, want the first only", n)
		}
	})
	t.Run("daily cap", func(t *testing.T) {
		s := startServer(t, "ZEISH_PLAN_DAILY_CREATES=1")
		createThenDelete(t, s)
		st, h, b := s.raw(t, "POST", sbx, s.key, body)
		if st != 429 || errorCode(b) != "daily_cap_reached" || h.Get("Retry-After") == "" {
			t.Fatalf("second create: %d %s, want 429 daily_cap_reached with Retry-After", st, b)
		}
	})
}

// TestBudgetAndMetering runs one real VM with a tiny budget at a steep
// vCPU price: it takes the account's only running slot (a second create
// and a fork of 2 are refused), is stopped with reason budget_exhausted
// once its cost reaches max_cost_micros, cannot be started again, and its
// usage survives a zeishd restart. The pricing calculator and the CLI's
// usage, cost and admin commands run against the same server.
func TestBudgetAndMetering(t *testing.T) {
	s := startServer(t, "ZEISH_PLAN_RUNNING_SLOTS=1", "ZEISH_PRICE_VCPU_SECOND_MICROS=1000")
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	const budget = 5000 // about 5 s of running at 1000 per vCPU-second
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "thrifty", MemoryMiB: 256, MaxCostMicros: budget})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMiB: 256}); !errors.Is(err, errdefs.ErrRunningSlots) {
		t.Fatalf("second create: %v, want running_slots_full", err)
	}
	if _, err := c.CloneSandbox(ctx, sb.ID, api.CloneRequest{Count: 2}); !errors.Is(err, errdefs.ErrRunningSlots) {
		t.Fatalf("fork of 2: %v, want running_slots_full", err)
	}
	if list, _ := c.ListSandboxes(ctx, zeish.ListOptions{}); len(list) != 1 {
		t.Fatalf("refusals made sandboxes: %+v", list)
	}

	stopped, err := c.WaitForState(ctx, sb.ID, sandbox.StateStopped)
	if err != nil || stopped.StateReason != "budget_exhausted" || stopped.CostMicros < budget {
		t.Fatalf("after the budget: %+v %v, want stopped, budget_exhausted", stopped, err)
	}
	if _, err := c.StartSandbox(ctx, sb.ID); !errors.Is(err, errdefs.ErrBudgetExhausted) {
		t.Fatalf("start past the budget: %v, want budget_exhausted", err)
	}
	if _, err := c.Access(ctx, sb.ID, time.Minute); !errors.Is(err, errdefs.ErrInvalidState) {
		t.Fatalf("access while stopped: %v, want invalid_state", err)
	}

	before, err := c.Usage(ctx, time.Time{}, time.Time{})
	if err != nil || len(before.Sandboxes) != 1 || before.Total.RunningSeconds <= 0 || before.Total.CostMicros < budget ||
		before.Total.DiskGiBSeconds <= 0 || before.Prices.VCPUSecond != 1000 {
		t.Fatalf("usage: %+v %v", before, err)
	}
	s.stop()
	s.start()
	after, err := c.Usage(ctx, time.Time{}, time.Time{})
	if err != nil || after.Total.RunningSeconds != before.Total.RunningSeconds || after.Total.CostMicros < before.Total.CostMicros {
		t.Fatalf("usage after a restart: %+v %v (before %+v)", after.Total, err, before.Total)
	}
	// A window before the sandbox existed is empty.
	if early, err := c.Usage(ctx, sb.CreatedAt.Add(-time.Hour), sb.CreatedAt.Add(-time.Minute)); err != nil || early.Total.CostMicros != 0 {
		t.Fatalf("early window: %+v %v", early, err)
	}

	t.Run("pricing estimate", func(t *testing.T) {
		est, err := c.EstimatePrice(ctx, zeish.EstimateRequest{Sandboxes: 2, VCPUs: 1, MemoryMiB: 1024, DiskMiB: 1024, Minutes: 1})
		// 2 × 60 s × (1000 + 4.5 + 0.04)
		if err != nil || est.Usage.CostMicros != 120545 {
			t.Fatalf("estimate: %+v %v", est, err)
		}
		for _, q := range []string{"minutes=0", "sandboxes=-1", "vcpus=x", "size=huge", "colour=red"} {
			st, _, b := s.raw(t, "GET", api.BasePath+"/public/pricing/estimate?"+q, s.key, "")
			if st != 400 || errorCode(b) != "invalid_argument" {
				t.Errorf("estimate?%s: %d %s", q, st, b)
			}
		}
		for _, q := range []string{"from=yesterday", "to=2026-13-01T00:00:00Z", "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z"} {
			st, _, b := s.raw(t, "GET", api.BasePath+"/public/usage?"+q, s.key, "")
			if st != 400 || errorCode(b) != "invalid_argument" {
				t.Errorf("usage?%s: %d %s", q, st, b)
			}
		}
	})

	t.Run("cli", func(t *testing.T) {
		out, errOut, code := s.zeishctl(t, "", "usage", "-o", "json")
		var rep api.UsageReport
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Total.CostMicros < budget {
			t.Fatalf("zeishctl usage: %d %s %s", code, out, errOut)
		}
		out, errOut, code = s.zeishctl(t, "", "cost", "estimate", "--sandboxes", "2", "--vcpus", "1", "--memory-mib", "1024", "--disk-mib", "1024", "--minutes", "1")
		if code != 0 || !strings.Contains(out, "$0.120545") {
			t.Fatalf("zeishctl cost estimate: %d %q %s", code, out, errOut)
		}
		out, errOut, code = s.zeishctl(t, "", "admin", "accounts", "create", "cli-team")
		accID := strings.TrimSpace(out)
		if code != 0 || sandbox.CheckID(sandbox.PrefixAccount, accID) != nil {
			t.Fatalf("admin accounts create: %d %q %s", code, out, errOut)
		}
		out, errOut, code = s.zeishctl(t, "", "admin", "keys", "create", accID, "-o", "json")
		var k api.CreatedAPIKey
		if code != 0 || json.Unmarshal([]byte(out), &k) != nil || !strings.HasPrefix(k.Key, "zk_") {
			t.Fatalf("admin keys create: %d %q %s", code, out, errOut)
		}
		if out, _, code = s.zeishctl(t, "", "keys", "list", "--account", accID); code != 0 || !strings.Contains(out, k.ID) || strings.Contains(out, k.Key) {
			t.Fatalf("keys list: %d %q", code, out)
		}
		if out, errOut, code = s.zeishctl(t, "", "keys", "revoke", k.ID); code != 0 {
			t.Fatalf("keys revoke: %d %q %s", code, out, errOut)
		}
		if out, _, code = s.zeishctl(t, "", "admin", "accounts", "list"); code != 0 || !strings.Contains(out, "cli-team") {
			t.Fatalf("accounts list: %d %q", code, out)
		}
		if _, err := s.clientFor(t, k.Key).ListSandboxes(ctx, zeish.ListOptions{}); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Fatalf("revoked key: %v", err)
		}
	})
}
