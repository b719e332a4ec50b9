package cli

import (
	"os"
	"strconv"

	"github.com/spf13/cobra"

	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) desktopCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "desktop",
		Short: "Drive a sandbox's desktop (sandboxes made with --desktop): screenshots, mouse, keyboard",
		Long: `Drive the desktop of a sandbox created or forked with desktop: true, the way
computer-use agents do. Coordinates are pixels from the screen's top left corner;
keys are X keysym names as xdotool writes them (Return, ctrl+c, alt+F4).`,
	})
	// result prints the cursor's position after an action.
	result := func(res zeish.DesktopActionResult) error {
		if a.json() {
			return a.printJSON(res)
		}
		a.printf("cursor at %d,%d\n", res.X, res.Y)
		return nil
	}
	ints := func(args []string) ([]int, error) {
		out := make([]int, len(args))
		for i, s := range args {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, usageErrorf("%q is not a pixel coordinate", s)
			}
			out[i] = n
		}
		return out, nil
	}
	status := &cobra.Command{
		Use:   "status ID",
		Short: "Show the desktop's display, screen size and window manager",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.sdk().Desktop(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(st)
			}
			if !st.Running {
				a.printf("not running (the sandbox does not run)\n")
				return nil
			}
			a.printf("display %s, %dx%dx%d, window manager %q, user %s\n", st.Display, st.Width, st.Height, st.Depth, st.WindowManager, st.User)
			return nil
		},
	}
	screenshot := &cobra.Command{
		Use:   "screenshot ID FILE",
		Short: "Save the screen as a PNG (FILE - writes it to stdout)",
		Args:  cobra.ExactArgs(2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			png, err := conn.Screenshot(cmd.Context())
			if err != nil {
				return err
			}
			if args[0] == "-" {
				_, err := a.out.Write(png)
				return err
			}
			if err := os.WriteFile(args[0], png, 0o644); err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"file": args[0], "bytes": len(png)})
			}
			a.printf("%s: %d bytes\n", args[0], len(png))
			return nil
		}),
	}
	var button string
	click := &cobra.Command{
		Use:   "click ID X Y",
		Short: "Click at X, Y (--button left, right, middle or double)",
		Args: func(cmd *cobra.Command, args []string) error {
			switch button {
			case "left", "right", "middle", "double":
			default:
				return usageErrorf("--button wants left, right, middle or double, got %q", button)
			}
			return cobra.ExactArgs(3)(cmd, args)
		},
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			xy, err := ints(args)
			if err != nil {
				return err
			}
			res, err := conn.Click(cmd.Context(), xy[0], xy[1], button)
			if err != nil {
				return err
			}
			return result(res)
		}),
	}
	click.Flags().StringVar(&button, "button", "left", "left, right, middle, or double (a left double click)")
	move := &cobra.Command{
		Use:   "move ID X Y",
		Short: "Move the pointer to X, Y",
		Args:  cobra.ExactArgs(3),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			xy, err := ints(args)
			if err != nil {
				return err
			}
			res, err := conn.MoveMouse(cmd.Context(), xy[0], xy[1])
			if err != nil {
				return err
			}
			return result(res)
		}),
	}
	drag := &cobra.Command{
		Use:   "drag ID X1 Y1 X2 Y2",
		Short: "Drag with the left button from X1, Y1 to X2, Y2",
		Args:  cobra.ExactArgs(5),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			p, err := ints(args)
			if err != nil {
				return err
			}
			res, err := conn.Drag(cmd.Context(), p[0], p[1], p[2], p[3])
			if err != nil {
				return err
			}
			return result(res)
		}),
	}
	typ := &cobra.Command{
		Use:   "type ID TEXT",
		Short: "Type TEXT into the focused window (a newline presses Return)",
		Args:  cobra.ExactArgs(2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			res, err := conn.TypeText(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return result(res)
		}),
	}
	key := &cobra.Command{
		Use:   "key ID KEYS",
		Short: `Press key combos, e.g. "ctrl+c", "Return", "ctrl+a Delete"`,
		Args:  cobra.ExactArgs(2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			res, err := conn.PressKeys(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return result(res)
		}),
	}
	var direction string
	var amount int
	scroll := &cobra.Command{
		Use:   "scroll ID X Y",
		Short: "Turn the wheel at X, Y (--direction, --amount)",
		Args:  cobra.ExactArgs(3),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			xy, err := ints(args)
			if err != nil {
				return err
			}
			res, err := conn.Scroll(cmd.Context(), xy[0], xy[1], direction, amount)
			if err != nil {
				return err
			}
			return result(res)
		}),
	}
	scroll.Flags().StringVar(&direction, "direction", "down", "up, down, left or right")
	scroll.Flags().IntVar(&amount, "amount", 3, "wheel clicks")
	cursor := &cobra.Command{
		Use:   "cursor ID",
		Short: "Print the pointer's position",
		Args:  cobra.ExactArgs(1),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, _ []string) error {
			res, err := conn.CursorPosition(cmd.Context())
			if err != nil {
				return err
			}
			return result(res)
		}),
	}
	cmd.AddCommand(status, screenshot, click, move, drag, typ, key, scroll, cursor)
	return cmd
}
