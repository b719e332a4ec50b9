package main

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/dialguard"
)

func TestTemplateLimits(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		check   func(t *testing.T, o catalog.BuildOptions)
		wantErr bool
	}{
		{env: nil, check: func(t *testing.T, o catalog.BuildOptions) {
			if o.Timeout != 30*time.Minute || o.Quota.Templates != 20 || o.Quota.Bytes != 64<<30 || o.Quota.Uploads != 2 {
				t.Errorf("defaults: %+v %+v", o.Timeout, o.Quota)
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
		{env: map[string]string{"ZEISH_REGISTRY_ALLOW_RANGES": "10.0.0.1"}, wantErr: true},
		{env: map[string]string{"ZEISH_TEMPLATE_BUILD_TIMEOUT": "0s"}, wantErr: true},
		{env: map[string]string{"ZEISH_PLAN_TEMPLATES": "-1"}, wantErr: true},
		{env: map[string]string{"ZEISH_PLAN_TEMPLATE_MIB": "1g"}, wantErr: true},
		{env: map[string]string{"ZEISH_PLAN_TEMPLATE_UPLOADS": "x"}, wantErr: true},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		o, err := templateLimits()
		if (err != nil) != tc.wantErr {
			t.Errorf("%v: %v, want error %v", tc.env, err, tc.wantErr)
		} else if err == nil && tc.check != nil {
			tc.check(t, o)
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}
