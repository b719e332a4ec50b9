package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// BenchmarkList measures a store alone listing 1,000 sandboxes, whole and by
// pages of 50, to tell the database's share of bench's `api` figures from the
// server's.
func BenchmarkList(b *testing.B, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	var batch []*store.SandboxRecord
	for i := 0; i < 1000; i++ {
		batch = append(batch, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: fmt.Sprintf("sbx_%020d", i), AccountID: "acc_a",
			Name: fmt.Sprintf("n%04d", i), State: sandbox.StateStopped, Template: "base", MemoryMiB: 256, VCPUs: 1, DiskMiB: 1024,
			Env: map[string]string{"N": fmt.Sprint(i)}, CreatedAt: now.Add(time.Duration(i) * time.Millisecond)}})
	}
	if err := s.CreateSandboxes(ctx, batch...); err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		f    func(i int) store.SandboxFilter
		want int
	}{
		{"all", func(int) store.SandboxFilter { return store.SandboxFilter{AccountID: "acc_a"} }, 1000},
		{"page of 50", func(i int) store.SandboxFilter {
			return store.SandboxFilter{AccountID: "acc_a", Limit: 50, After: fmt.Sprintf("sbx_%020d", i%900)}
		}, 50},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				rs, err := s.ListSandboxes(ctx, c.f(i))
				if err != nil || len(rs) != c.want {
					b.Fatalf("list: %d rows, %v", len(rs), err)
				}
			}
		})
	}
}
