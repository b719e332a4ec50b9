package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

func TestDetectAccel(t *testing.T) {
	dir := t.TempDir()
	rw := filepath.Join(dir, "kvm-rw")
	if err := os.WriteFile(rw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(dir, "kvm-ro")
	if err := os.WriteFile(ro, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "none")
	roOpens := false // root opens 0400 files read-write anyway
	if f, err := os.OpenFile(ro, os.O_RDWR, 0); err == nil {
		roOpens = true
		f.Close()
	}

	tests := []struct {
		name      string
		requested vmm.Accel
		kvm       string
		want      vmm.Accel
		wantErr   bool
	}{
		{"auto picks kvm when it opens read-write", "", rw, vmm.AccelKVM, false},
		{"auto falls back to tcg without /dev/kvm", "", missing, vmm.AccelTCG, false},
		{"tcg on request even with kvm", vmm.AccelTCG, rw, vmm.AccelTCG, false},
		{"kvm on request", vmm.AccelKVM, rw, vmm.AccelKVM, false},
		{"kvm on request without /dev/kvm fails", vmm.AccelKVM, missing, "", true},
		{"unknown accel fails", "hvf", rw, "", true},
	}
	if !roOpens {
		tests = append(tests, struct {
			name      string
			requested vmm.Accel
			kvm       string
			want      vmm.Accel
			wantErr   bool
		}{"auto needs read-write, not read-only", "", ro, vmm.AccelTCG, false})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := detectAccel(tc.requested, tc.kvm)
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want ErrInvalidArgument", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("detectAccel = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
