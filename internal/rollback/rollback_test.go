package rollback

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

func TestStack(t *testing.T) {
	cases := []struct {
		name    string
		fail    error
		want    []int
		wantErr bool
	}{
		{"success releases", nil, nil, false},
		{"failure undoes newest first", errors.New("step 3 failed"), []int{2, 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ran []int
			err := func() (err error) {
				var s Stack
				defer s.OnError(context.Background(), &err)
				for i := 1; i <= 2; i++ {
					s.Add(func(context.Context) error { ran = append(ran, i); return nil })
				}
				if c.fail != nil {
					return c.fail
				}
				s.Release()
				return nil
			}()
			if (err != nil) != c.wantErr || !reflect.DeepEqual(ran, c.want) {
				t.Fatalf("err=%v ran=%v, want err=%v ran=%v", err, ran, c.wantErr, c.want)
			}
		})
	}
}

func TestRunOutlivesCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var s Stack
	var sawErr error
	s.Add(func(ctx context.Context) error { sawErr = ctx.Err(); return nil })
	s.Run(ctx)
	if sawErr != nil {
		t.Fatalf("undo saw a cancelled context: %v", sawErr)
	}
}
