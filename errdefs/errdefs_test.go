package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	plain := errors.New("disk full")
	cases := []struct {
		name string
		err  error
		want *Error
	}{
		{"wrapped code", fmt.Errorf("snapshot %q: %w", "a", ErrNameTaken), ErrNameTaken},
		{"no code is internal", plain, ErrInternal},
		{"reclassed", Reclass(fmt.Errorf("vm spec: %w: memory", ErrInvalidArgument), ErrInternal), ErrInternal},
		{"reclassed, then wrapped", fmt.Errorf("fork: %w", Reclass(ErrInvalidState, ErrUnavailable)), ErrUnavailable},
		{"first code of a join wins", fmt.Errorf("store: %w: %w", ErrUnavailable, plain), ErrUnavailable},
	}
	for _, c := range cases {
		if got := Of(c.err); got != c.want {
			t.Errorf("%s: Of = %s, want %s", c.name, got.Code, c.want.Code)
		}
	}
	// The class is the new one; the chain is kept for the layer's own checks.
	err := Reclass(fmt.Errorf("x: %w", ErrInvalidArgument), ErrInternal)
	if Is(err, ClassInvalid) || !Is(err, ClassInternal) {
		t.Error("Is reads the class inside a reclassed error")
	}
	if !errors.Is(err, ErrInvalidArgument) {
		t.Error("errors.Is lost the wrapped chain")
	}
	if err.Error() != "x: invalid_argument" {
		t.Errorf("message %q", err.Error())
	}
	if Reclass(nil, ErrInternal) != nil {
		t.Error("Reclass(nil) is not nil")
	}
}

// Every code is unique and ByCode finds it.
func TestCodes(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range All() {
		if seen[e.Code] || ByCode(e.Code) != e || e.Doc == "" {
			t.Errorf("code %q: duplicate, unfindable or undocumented", e.Code)
		}
		seen[e.Code] = true
	}
}
