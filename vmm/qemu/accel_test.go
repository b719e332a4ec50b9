package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

// fakeHost is a /dev/kvm, a /sys/module and a guest kernel in a temp dir.
type fakeHost struct {
	dir, kvm, sysModule, kernel, cache string
}

func newFakeHost(t *testing.T) fakeHost {
	dir := t.TempDir()
	h := fakeHost{dir: dir, kvm: filepath.Join(dir, "kvm"), sysModule: filepath.Join(dir, "module"),
		kernel: filepath.Join(dir, "vmlinuz"), cache: filepath.Join(dir, "accel.json")}
	for _, f := range []string{h.kvm, h.kernel} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(h.sysModule, "kvm"), 0o755); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestChooseAccel(t *testing.T) {
	type probeResult struct {
		ok     bool
		detail string
	}
	tests := []struct {
		name       string
		requested  vmm.Accel
		noDevice   bool
		pvm        bool
		probe      probeResult
		cached     *AccelVerdict // written before the call, with the current key
		staleCache bool          // the cached verdict has another key
		want       vmm.Accel
		wantReason string
		wantProbes int
		wantErr    error
	}{
		{name: "device missing", noDevice: true, want: vmm.AccelTCG, wantReason: "no ", wantProbes: 0},
		{name: "probe ok", probe: probeResult{ok: true}, want: vmm.AccelKVM, wantReason: "probe booted", wantProbes: 1},
		{name: "probe silent", probe: probeResult{detail: "probe boot silent after 15s"}, want: vmm.AccelTCG,
			wantReason: "probe boot silent", wantProbes: 1},
		{name: "pvm host says why", pvm: true, probe: probeResult{detail: "probe boot silent after 15s"}, want: vmm.AccelTCG,
			wantReason: "kvm_pvm module: needs a PVM guest kernel", wantProbes: 1},
		{name: "cache hit skips the probe", cached: &AccelVerdict{Accel: vmm.AccelTCG, Reason: "probe boot silent after 15s"},
			probe: probeResult{ok: true}, want: vmm.AccelTCG, wantReason: "probe boot silent", wantProbes: 0},
		{name: "changed key probes again", cached: &AccelVerdict{Accel: vmm.AccelTCG, Reason: "old"}, staleCache: true,
			probe: probeResult{ok: true}, want: vmm.AccelKVM, wantReason: "probe booted", wantProbes: 1},
		{name: "tcg skips the probe", requested: vmm.AccelTCG, probe: probeResult{ok: true}, want: vmm.AccelTCG,
			wantReason: "ZEISH_ACCEL=tcg", wantProbes: 0},
		{name: "forced kvm works", requested: vmm.AccelKVM, probe: probeResult{ok: true}, want: vmm.AccelKVM, wantProbes: 1},
		{name: "forced kvm fails fast with the reason", requested: vmm.AccelKVM, probe: probeResult{detail: "probe boot silent after 15s"},
			wantProbes: 1, wantErr: errdefs.ErrInvalidArgument, wantReason: "probe boot silent"},
		{name: "forced kvm without a device", requested: vmm.AccelKVM, noDevice: true, wantErr: errdefs.ErrInvalidArgument, wantReason: "no "},
		{name: "unknown accel", requested: "hvf", wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			if tc.noDevice {
				os.Remove(h.kvm)
			}
			if tc.pvm {
				os.MkdirAll(filepath.Join(h.sysModule, "kvm_pvm"), 0o755)
			}
			probes := 0
			o := AccelOptions{Requested: tc.requested, QEMUPath: "/bin/true", Kernel: h.kernel, CacheFile: h.cache,
				kvmDevice: h.kvm, sysModule: h.sysModule,
				probe: func(context.Context, string, string) (bool, string) {
					probes++
					return tc.probe.ok, tc.probe.detail
				}}
			if tc.cached != nil {
				key, err := o.cacheKey()
				if err != nil {
					t.Fatal(err)
				}
				v := *tc.cached
				v.Key = key
				if tc.staleCache {
					v.Key = "another host"
				}
				writeVerdict(h.cache, v)
			}
			v, err := ChooseAccel(context.Background(), o)
			if probes != tc.wantProbes {
				t.Errorf("probes = %d, want %d", probes, tc.wantProbes)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantReason) {
					t.Fatalf("err = %v, want %v mentioning %q", err, tc.wantErr, tc.wantReason)
				}
				return
			}
			if err != nil || v.Accel != tc.want || !strings.Contains(v.Reason, tc.wantReason) || v.Reason == "" {
				t.Fatalf("ChooseAccel = %+v, %v; want %s with a reason containing %q", v, err, tc.want, tc.wantReason)
			}
		})
	}
}

// A probe's verdict is cached and found again by the next start, and
// Reprobe ignores it.
func TestChooseAccelCacheRoundTrip(t *testing.T) {
	h := newFakeHost(t)
	probes := 0
	o := AccelOptions{QEMUPath: "/bin/true", Kernel: h.kernel, CacheFile: h.cache, kvmDevice: h.kvm, sysModule: h.sysModule,
		probe: func(context.Context, string, string) (bool, string) { probes++; return true, "" }}
	first, _ := ChooseAccel(context.Background(), o)
	second, _ := ChooseAccel(context.Background(), o)
	if probes != 1 || first.Cached || !second.Cached || second.Accel != vmm.AccelKVM || second.Reason != first.Reason {
		t.Fatalf("first %+v second %+v probes %d: want one probe, the second cached", first, second, probes)
	}
	o.Reprobe = true
	if _, err := ChooseAccel(context.Background(), o); err != nil || probes != 2 {
		t.Fatalf("reprobe: probes %d, err %v", probes, err)
	}
	// Another guest kernel is another key.
	os.WriteFile(h.kernel, []byte("another kernel"), 0o600)
	o.Reprobe = false
	ChooseAccel(context.Background(), o)
	if probes != 3 {
		t.Fatalf("changed kernel: probes %d, want 3", probes)
	}
}

// The real probe, run against this host: whatever it decides, it decides
// with a reason, and never hangs past its bound.
func TestChooseAccelOnThisHost(t *testing.T) {
	d := newTestDriver(t)
	c := d.Capabilities()
	if c.Accel == "" || c.AccelReason == "" {
		t.Fatalf("capabilities %+v: want an accel and a reason", c)
	}
	t.Logf("accel %s: %s (probe %d ms)", c.Accel, c.AccelReason, c.AccelProbeMS)
}

// The probe itself, run under TCG (the same code path as under KVM): it sees
// the real guest kernel's banner, and says why a garbage kernel fails.
func TestProbeBoot(t *testing.T) {
	newTestDriver(t) // skips (or fails under CI) where QEMU is missing
	kernel, _, err := testKernel()
	if err != nil {
		t.Fatal(err)
	}
	if ok, detail := probeBoot(context.Background(), "qemu-system-x86_64", kernel, vmm.AccelTCG, time.Minute); !ok {
		t.Fatalf("real kernel: probe failed: %s", detail)
	}
	garbage := filepath.Join(t.TempDir(), "vmlinuz")
	os.WriteFile(garbage, []byte(strings.Repeat("not a kernel ", 1000)), 0o600)
	ok, detail := probeBoot(context.Background(), "qemu-system-x86_64", garbage, vmm.AccelTCG, 20*time.Second)
	if ok || detail == "" {
		t.Fatalf("garbage kernel: ok %v detail %q: want a failure with a reason", ok, detail)
	}
	t.Logf("garbage kernel: %s", detail)
}
