package zeish

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

func TestSettledErr(t *testing.T) {
	failed := Sandbox{ID: "sbx_1", Name: "demo", State: sandbox.StateError,
		ErrorCode: sandbox.ErrBootFailed, ErrorMessage: "Kernel panic - not syncing"}
	running := Sandbox{ID: "sbx_2", State: sandbox.StateRunning}
	callErr := errors.New("transport")
	tests := []struct {
		name string
		sb   Sandbox
		err  error
		opts []CallOption
		want string // "" = nil error
	}{
		{"waited create that failed raises the code and message", failed, nil, []CallOption{Wait()}, "boot_failed: Kernel panic"},
		{"without Wait the sandbox is returned as it is", failed, nil, nil, ""},
		{"running is no error", running, nil, []CallOption{Wait()}, ""},
		{"a call error wins", failed, callErr, []CallOption{Wait()}, "transport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := settledErr(tt.sb, tt.err, tt.opts)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			var se *SandboxError
			if tt.err == nil && (!errors.As(err, &se) || !errors.Is(err, errdefs.ErrInvalidState) || se.Sandbox.ErrorCode != sandbox.ErrBootFailed) {
				t.Fatalf("err = %#v, want a *SandboxError that is ErrInvalidState", err)
			}
		})
	}
}
