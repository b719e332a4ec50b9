package main

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/dialguard"
)

// The template limits' variables reach the catalog's build options; a bad
// value stops zeishd naming the variable (config.Load).
func TestBuildOptions(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		check   func(t *testing.T, o catalog.BuildOptions)
		wantErr string
	}{
		{env: nil, check: func(t *testing.T, o catalog.BuildOptions) {
			if o.Timeout != 30*time.Minute || o.Quota.Templates != 20 || o.Quota.Bytes != 64<<30 || o.Quota.Uploads != 2 || o.Parallel != 2 {
				t.Errorf("defaults: %+v %+v %d", o.Timeout, o.Quota, o.Parallel)
			}
			if err := o.RegistryGuard.Check(netip.MustParseAddr("10.1.2.3")); !errors.Is(err, dialguard.ErrBlocked) {
				t.Errorf("10.1.2.3 by default: %v", err)
			}
		}},
		{env: map[string]string{"ZEISH_REGISTRY_ALLOW_RANGES": "10.0.0.0/8, fd00::/8", "ZEISH_TEMPLATE_BUILD_TIMEOUT": "5m",
			"ZEISH_PLAN_TEMPLATES": "0", "ZEISH_PLAN_TEMPLATE_MIB": "1024", "ZEISH_PLAN_TEMPLATE_UPLOADS": "1"}, check: func(t *testing.T, o catalog.BuildOptions) {
			if o.Timeout != 5*time.Minute || o.Quota.Templates != 0 || o.Quota.Bytes != 1<<30 || o.Quota.Uploads != 1 {
				t.Errorf("set: %+v %+v", o.Timeout, o.Quota)
			}
			if err := o.RegistryGuard.Check(netip.MustParseAddr("10.1.2.3")); err != nil {
				t.Errorf("10.1.2.3 opened: %v", err)
			}
			if err := o.RegistryGuard.Check(netip.MustParseAddr("127.0.0.1")); !errors.Is(err, dialguard.ErrBlocked) {
				t.Errorf("loopback not opened: %v", err)
			}
		}},
		{env: map[string]string{"ZEISH_REGISTRY_ALLOW_RANGES": "10.0.0.1"}, wantErr: "ZEISH_REGISTRY_ALLOW_RANGES"},
		{env: map[string]string{"ZEISH_TEMPLATE_BUILD_TIMEOUT": "0s"}, wantErr: "ZEISH_TEMPLATE_BUILD_TIMEOUT"},
		{env: map[string]string{"ZEISH_PLAN_TEMPLATES": "-1"}, wantErr: "ZEISH_PLAN_TEMPLATES"},
		{env: map[string]string{"ZEISH_PLAN_TEMPLATE_MIB": "1g"}, wantErr: "ZEISH_PLAN_TEMPLATE_MIB"},
		{env: map[string]string{"ZEISH_PLAN_TEMPLATE_UPLOADS": "x"}, wantErr: "ZEISH_PLAN_TEMPLATE_UPLOADS"},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		cfg, err := config.Load(nil, lookup, config.Host{DataDir: t.TempDir(), MemoryMiB: 8 << 10})
		if err == nil {
			var o catalog.BuildOptions
			if o, err = buildOptions(cfg); err == nil {
				if tc.wantErr != "" {
					t.Errorf("%v: no error, want one naming %s", tc.env, tc.wantErr)
				} else {
					tc.check(t, o)
				}
				continue
			}
		}
		if tc.wantErr == "" || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: %v, want an error naming %q", tc.env, err, tc.wantErr)
		}
	}
}
