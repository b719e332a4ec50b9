package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

// The accelerator is chosen by proof, not by a device that opens: a host can
// have a /dev/kvm that QEMU opens and SeaBIOS runs on while a stock guest
// kernel never prints a line (the kvm_pvm module, nested hosts with broken
// EPT). So KVM is used only once a probe boots the guest kernel under it, on
// the machine type sandboxes use, and reaches the kernel's banner. The verdict
// is cached under a key of everything that decides it.

// AccelVerdict is the accelerator zeish runs guests under, and why.
type AccelVerdict struct {
	Accel   vmm.Accel `json:"accel"`
	Reason  string    `json:"reason"`
	ProbeMS int64     `json:"probe_ms"` // 0 when no probe ran (skipped, or cached)
	Key     string    `json:"key,omitempty"`
	Cached  bool      `json:"cached,omitempty"`
}

// AccelOptions say how to choose.
type AccelOptions struct {
	// Requested is ZEISH_ACCEL: "" decides by probe, "tcg" skips the probe,
	// "kvm" insists (and fails at once when the probe fails).
	Requested vmm.Accel
	QEMUPath  string // default qemu-system-x86_64 from PATH
	// Kernel is the guest kernel to probe with: the template's own.
	Kernel string
	// CacheFile keeps the verdict across restarts ("" = no cache).
	CacheFile string
	// Reprobe ignores a cached verdict (zeishd --accel-probe).
	Reprobe bool
	// Timeout bounds the probe boot; default 15 s. A KVM guest prints its
	// banner well within a second.
	Timeout time.Duration

	// Host facts and the probe itself, replaced by unit tests.
	kvmDevice string // default /dev/kvm
	sysModule string // default /sys/module
	probe     func(ctx context.Context, qemuPath, kernel string) (ok bool, detail string)
}

// kvmDevice is where KVM is opened.
const kvmDevice = "/dev/kvm"

// probeBanner is what a Linux kernel prints first on its console.
const probeBanner = "Linux version"

// ChooseAccel decides the accelerator: the one function zeishd, the test
// harness and the bench use. The error is for bad input and for a KVM that
// was insisted on but does not work; otherwise it falls back to TCG with the
// reason.
func ChooseAccel(ctx context.Context, o AccelOptions) (AccelVerdict, error) {
	if o.kvmDevice == "" {
		o.kvmDevice = kvmDevice
	}
	if o.sysModule == "" {
		o.sysModule = "/sys/module"
	}
	if o.Timeout == 0 {
		o.Timeout = 15 * time.Second
	}
	if o.QEMUPath == "" {
		o.QEMUPath = "qemu-system-x86_64"
	}
	if o.probe == nil {
		o.probe = func(ctx context.Context, qemuPath, kernel string) (bool, string) {
			return probeBoot(ctx, qemuPath, kernel, vmm.AccelKVM, o.Timeout)
		}
	}
	switch o.Requested {
	case "", vmm.AccelKVM:
	case vmm.AccelTCG:
		return AccelVerdict{Accel: vmm.AccelTCG, Reason: "ZEISH_ACCEL=tcg: probe skipped"}, nil
	default:
		return AccelVerdict{}, fmt.Errorf("accel %q: %w: want kvm, tcg or empty (probe)", o.Requested, errdefs.ErrInvalidArgument)
	}
	v := o.decide(ctx)
	if o.Requested == vmm.AccelKVM && v.Accel != vmm.AccelKVM {
		return v, fmt.Errorf("ZEISH_ACCEL=kvm, but KVM cannot run the guest here: %s: %w", v.Reason, errdefs.ErrInvalidArgument)
	}
	return v, nil
}

func (o AccelOptions) decide(ctx context.Context) AccelVerdict {
	tcg := func(reason string) AccelVerdict { return AccelVerdict{Accel: vmm.AccelTCG, Reason: reason} }
	f, err := os.OpenFile(o.kvmDevice, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return tcg("no " + o.kvmDevice)
	case err != nil:
		return tcg(fmt.Sprintf("%s does not open: %v", o.kvmDevice, err))
	}
	f.Close()
	if o.Kernel == "" {
		return tcg("no guest kernel to probe KVM with")
	}
	key, err := o.cacheKey()
	if err != nil {
		return tcg("probe: " + err.Error())
	}
	if !o.Reprobe {
		if v, ok := readVerdict(o.CacheFile, key); ok {
			return v
		}
	}
	began := time.Now()
	ok, detail := o.probe(ctx, o.QEMUPath, o.Kernel)
	v := AccelVerdict{Accel: vmm.AccelKVM, Reason: "probe booted the guest kernel under KVM", Key: key,
		ProbeMS: time.Since(began).Milliseconds()}
	if !ok {
		v.Accel, v.Reason = vmm.AccelTCG, detail
		if o.pvm() {
			v.Reason = "kvm_pvm module: needs a PVM guest kernel; " + detail
		}
	}
	if ctx.Err() == nil {
		writeVerdict(o.CacheFile, v)
	}
	return v
}

// pvm reports whether /dev/kvm is served by the kvm_pvm module, which runs
// only kernels built for PVM.
func (o AccelOptions) pvm() bool {
	_, err := os.Stat(filepath.Join(o.sysModule, "kvm_pvm"))
	return err == nil
}

// cacheKey hashes what decides the verdict: the host kernel, the KVM modules
// loaded, QEMU's version and the guest kernel's bytes.
func (o AccelOptions) cacheKey() (string, error) {
	h := sha256.New()
	var u syscall.Utsname
	if err := syscall.Uname(&u); err == nil {
		fmt.Fprintf(h, "host %s\n", utsString(u.Release[:]))
	}
	mods, _ := filepath.Glob(filepath.Join(o.sysModule, "kvm*"))
	for i := range mods {
		mods[i] = filepath.Base(mods[i])
	}
	slices.Sort(mods)
	fmt.Fprintf(h, "modules %s\n", strings.Join(mods, ","))
	if out, err := exec.Command(o.QEMUPath, "--version").Output(); err == nil {
		fmt.Fprintf(h, "qemu %s\n", firstLine(string(out)))
	}
	k, err := os.Open(o.Kernel)
	if err != nil {
		return "", fmt.Errorf("guest kernel: %w", err)
	}
	defer k.Close()
	if _, err := io.Copy(h, k); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func utsString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func readVerdict(path, key string) (AccelVerdict, bool) {
	if path == "" {
		return AccelVerdict{}, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return AccelVerdict{}, false
	}
	var v AccelVerdict
	if json.Unmarshal(b, &v) != nil || v.Key != key || (v.Accel != vmm.AccelKVM && v.Accel != vmm.AccelTCG) {
		return AccelVerdict{}, false
	}
	v.Cached, v.ProbeMS = true, 0
	return v, true
}

func writeVerdict(path string, v AccelVerdict) {
	if path == "" {
		return
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, path)
	}
}

// probeBoot boots kernel under accel on the machine sandboxes use, with no
// disk and no initrd, and watches its serial console for the banner. The
// guest panics soon after (no root), which -no-reboot turns into an exit.
func probeBoot(ctx context.Context, qemuPath, kernel string, accel vmm.Accel, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cpu := "max"
	if accel == vmm.AccelKVM {
		cpu = "host"
	}
	cmd := exec.CommandContext(ctx, qemuPath,
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "q35", "-accel", string(accel), "-cpu", cpu, "-m", "256M", "-smp", "1",
		"-kernel", kernel, "-append", "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1",
		"-serial", "stdio")
	var console, stderr bytes.Buffer
	found := make(chan struct{})
	cmd.Stdout = &bannerWriter{buf: &console, found: found}
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return false, "probe: " + err.Error()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-found:
		cmd.Process.Kill()
		<-done
		return true, ""
	case err := <-done:
		if bytes.Contains(console.Bytes(), []byte(probeBanner)) {
			return true, ""
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return false, "qemu -accel " + string(accel) + ": " + tail(msg, 300)
		}
		if ctx.Err() != nil {
			return false, fmt.Sprintf("probe boot silent after %s", timeout)
		}
		return false, fmt.Sprintf("probe exited (%v) before the kernel printed anything", err)
	}
}

// bannerWriter collects console output and signals once the banner shows.
type bannerWriter struct {
	buf   *bytes.Buffer
	found chan struct{}
	seen  bool
}

func (w *bannerWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if !w.seen && bytes.Contains(w.buf.Bytes(), []byte(probeBanner)) {
		w.seen = true
		close(w.found)
	}
	return len(p), nil
}
