package control

import (
	"context"
	"errors"
	"testing"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
)

// A build's vcpus and memory_mib size its warm machine: checked like a
// sandbox's size, and refused on a cold template.
func TestBuildRequestWarmSize(t *testing.T) {
	s := &Control{}
	for _, c := range []struct {
		name string
		req  api.BuildTemplateRequest
		want error
	}{
		{"default", api.BuildTemplateRequest{}, nil},
		{"1 GiB", api.BuildTemplateRequest{MemoryMiB: 1024}, nil},
		{"2 vCPUs", api.BuildTemplateRequest{VCPUs: 2, MemoryMiB: 2048}, nil},
		{"too little memory", api.BuildTemplateRequest{MemoryMiB: 64}, errdefs.ErrInvalidArgument},
		{"odd memory", api.BuildTemplateRequest{MemoryMiB: 1025}, errdefs.ErrInvalidArgument},
		{"too many vCPUs", api.BuildTemplateRequest{VCPUs: 99}, errdefs.ErrInvalidArgument},
		{"cold with a size", api.BuildTemplateRequest{MemoryMiB: 1024, Cold: true}, errdefs.ErrInvalidArgument},
	} {
		c.req.Name, c.req.From = "t", "registry:127.0.0.1:1/a:b"
		b, err := s.buildRequest(context.Background(), Caller{Account: api.Account{ID: "acc"}}, c.req, false)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if err == nil && (b.MemoryMiB != c.req.MemoryMiB || b.VCPUs != c.req.VCPUs) {
			t.Errorf("%s: build request %+v lost the size", c.name, b)
		}
	}
}
