package desktop

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeish/zeish/errdefs"
)

// Defaults of a desktop: display :0, 1280x800 at 24 bits.
const (
	DefaultDisplay = ":0"
	DefaultWidth   = 1280
	DefaultHeight  = 800
	DefaultDepth   = 24
)

// Bounds of a screen's size.
const (
	MinWidth, MaxWidth   = 320, 3840
	MinHeight, MaxHeight = 200, 2160
)

// Config is a desktop as the host asks for it.
type Config struct {
	Display string `json:"display"` // ":0"
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	Depth   int    `json:"depth"`
	// User runs the X server and the window manager ("" is root).
	User string `json:"user,omitempty"`
}

// WithDefaults fills what c leaves zero.
func (c Config) WithDefaults() Config {
	if c.Display == "" {
		c.Display = DefaultDisplay
	}
	if c.Width == 0 {
		c.Width = DefaultWidth
	}
	if c.Height == 0 {
		c.Height = DefaultHeight
	}
	if c.Depth == 0 {
		c.Depth = DefaultDepth
	}
	return c
}

// Check validates a configuration (after WithDefaults).
func (c Config) Check() error {
	if _, err := displayNumber(c.Display); err != nil {
		return err
	}
	if c.Width < MinWidth || c.Width > MaxWidth || c.Height < MinHeight || c.Height > MaxHeight {
		return fmt.Errorf("desktop size %dx%d: want %d..%d x %d..%d: %w", c.Width, c.Height, MinWidth, MaxWidth, MinHeight, MaxHeight, errdefs.ErrInvalidArgument)
	}
	if c.Depth != 24 {
		return fmt.Errorf("desktop depth %d: only 24 is supported: %w", c.Depth, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ParseSize reads "WIDTHxHEIGHT" or "WIDTHxHEIGHTxDEPTH" (Xvfb's -screen
// syntax) into c.
func ParseSize(s string) (Config, error) {
	var c Config
	parts := strings.Split(s, "x")
	if len(parts) < 2 || len(parts) > 3 {
		return c, fmt.Errorf("desktop size %q: want WIDTHxHEIGHT[xDEPTH], e.g. 1280x800x24: %w", s, errdefs.ErrInvalidArgument)
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return c, fmt.Errorf("desktop size %q: want WIDTHxHEIGHT[xDEPTH], e.g. 1280x800x24: %w", s, errdefs.ErrInvalidArgument)
		}
		nums[i] = n
	}
	c.Width, c.Height = nums[0], nums[1]
	if len(nums) == 3 {
		c.Depth = nums[2]
	}
	c = c.WithDefaults()
	return c, c.Check()
}

func displayNumber(display string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(display, ":"))
	if err != nil || !strings.HasPrefix(display, ":") || n < 0 || n > 999 {
		return 0, fmt.Errorf("display %q: want :N: %w", display, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// Status is a desktop as the agent reports it.
type Status struct {
	// Running: the X server runs (it is started before the sandbox reports
	// running, and again on the next action if it died).
	Running bool   `json:"running"`
	Display string `json:"display"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	Depth   int    `json:"depth"`
	// WindowManager is the window manager started ("" when the template
	// has none).
	WindowManager string `json:"window_manager"`
	User          string `json:"user"`
}
