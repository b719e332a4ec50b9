package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

func testAccountSecrets(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if list, err := s.ListAccountSecrets(ctx, "acc_1"); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("empty ListAccountSecrets = %#v, %v", list, err)
	}
	for _, sec := range []store.AccountSecret{
		{AccountID: "acc_1", Name: "REG", Value: "bob:old", UpdatedAt: now},
		{AccountID: "acc_1", Name: "REG", Value: "bob:pw", UpdatedAt: now.Add(time.Second)}, // replaces
		{AccountID: "acc_1", Name: "A", Value: "tok", UpdatedAt: now},
		{AccountID: "acc_2", Name: "REG", Value: "eve:pw", UpdatedAt: now},
	} {
		if err := s.PutAccountSecret(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetAccountSecret(ctx, "acc_1", "REG")
	if err != nil || got.Value != "bob:pw" || !got.UpdatedAt.Equal(now.Add(time.Second)) {
		t.Fatalf("GetAccountSecret = %+v, %v", got, err)
	}
	list, err := s.ListAccountSecrets(ctx, "acc_1")
	if err != nil || len(list) != 2 || list[0].Name != "A" || list[1].Name != "REG" || list[0].Value != "" || list[1].Value != "" {
		t.Fatalf("ListAccountSecrets = %+v, %v", list, err)
	}
	for _, c := range []struct{ acct, name string }{{"acc_1", "NOPE"}, {"acc_3", "REG"}} {
		if _, err := s.GetAccountSecret(ctx, c.acct, c.name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("GetAccountSecret(%s, %s) = %v, want not_found", c.acct, c.name, err)
		}
	}
	if err := s.DeleteAccountSecret(ctx, "acc_1", "REG"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAccountSecret(ctx, "acc_1", "REG"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	if got, err := s.GetAccountSecret(ctx, "acc_2", "REG"); err != nil || got.Value != "eve:pw" {
		t.Fatalf("another account's secret after delete: %+v, %v", got, err)
	}
}
