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

// Steps run in order; a failing step unwinds what the earlier ones did,
// newest first, and its name leads the error.
func TestRunSteps(t *testing.T) {
	var log []string
	step := func(name string, fail bool) Step {
		return Step{Name: name, Do: func(_ context.Context, undo *Stack) error {
			if fail {
				return errors.New("broke")
			}
			log = append(log, "do "+name)
			undo.Add(func(context.Context) error { log = append(log, "undo "+name); return nil })
			return nil
		}}
	}
	err := Run(context.Background(), step("boot", false), step("configure", false), step("capture", true), step("record", false))
	want := []string{"do boot", "do configure", "undo configure", "undo boot"}
	if err == nil || err.Error() != "capture: broke" || !reflect.DeepEqual(log, want) {
		t.Fatalf("err %v, log %v; want capture: broke and %v", err, log, want)
	}
	log = nil
	if err := Run(context.Background(), step("boot", false), step("record", false)); err != nil || !reflect.DeepEqual(log, []string{"do boot", "do record"}) {
		t.Fatalf("success: err %v, log %v", err, log)
	}
}

// A step marked AsIs fails with its error unchanged (a client's refusal
// keeps its words), and still unwinds what came before.
func TestRunAsIs(t *testing.T) {
	refused := errors.New("name taken")
	undone := false
	err := Run(context.Background(),
		Step{Name: "reserve", Do: func(_ context.Context, undo *Stack) error {
			undo.Add(func(context.Context) error { undone = true; return nil })
			return nil
		}},
		Step{Name: "record", AsIs: true, Do: func(context.Context, *Stack) error { return refused }},
	)
	if err != refused || !undone {
		t.Fatalf("err %v (undone %v), want the step's own error and the undo run", err, undone)
	}
}
