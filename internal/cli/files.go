package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) filesCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "files",
		Aliases: []string{"file", "fs"},
		Short:   "Copy, list and remove files inside a sandbox",
	})
	cmd.AddCommand(a.putCmd(), a.getFileCmd(), a.lsCmd(), a.statCmd(), a.mkdirCmd(), a.rmCmd())
	return cmd
}

// connected runs fn with a data-plane connection to the sandbox in args[0].
func (a *app) connected(fn func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		conn, err := a.sdk().Connect(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return fn(cmd, conn, args[1:])
	}
}

func (a *app) putCmd() *cobra.Command {
	var mode, user string
	cmd := &cobra.Command{
		Use:   "put ID LOCAL REMOTE",
		Short: "Upload a local file (- for stdin), streamed",
		Args:  cobra.ExactArgs(3),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			local, remote := args[0], args[1]
			var perm fs.FileMode
			if mode != "" {
				m, err := strconv.ParseUint(mode, 8, 32)
				if err != nil || m > 0o7777 {
					return usageErrorf("--mode wants octal permission bits like 0644, got %q", mode)
				}
				perm = fs.FileMode(m)
			}
			src := a.in
			if local != "-" {
				f, err := os.Open(local)
				if err != nil {
					return err
				}
				defer f.Close()
				if perm == 0 {
					if fi, err := f.Stat(); err == nil {
						perm = fi.Mode().Perm()
					}
				}
				src = f
			}
			fi, err := conn.WriteFileAs(cmd.Context(), remote, src, perm, user)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(fi)
			}
			a.printf("wrote %d bytes to %s\n", fi.Size, fi.Path)
			return nil
		}),
	}
	cmd.Flags().StringVar(&mode, "mode", "", "permission bits in octal (default: the local file's)")
	cmd.Flags().StringVar(&user, "user", "", "owner in the sandbox, a name or uid (default the template's user, else root)")
	return cmd
}

func (a *app) getFileCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID REMOTE [LOCAL]",
		Short: "Download a file (LOCAL - or omitted: stdout), streamed",
		Args:  cobra.RangeArgs(2, 3),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			rc, err := conn.ReadFile(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer rc.Close()
			if len(args) < 2 || args[1] == "-" {
				_, err = io.Copy(a.out, rc)
				return err
			}
			return writeLocal(args[1], rc)
		}),
	}
}

// writeLocal copies r to path, and removes the file again if the copy fails
// so no truncated download is left looking complete.
func writeLocal(path string, r io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("downloading to %s: %w", path, err)
	}
	return nil
}

func (a *app) lsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls ID [PATH]",
		Aliases: []string{"list"},
		Short:   "List a directory (default /)",
		Args:    cobra.RangeArgs(1, 2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			path := "/"
			if len(args) > 0 {
				path = args[0]
			}
			files, err := conn.ListFiles(cmd.Context(), path)
			if err != nil {
				return err
			}
			if a.json() {
				if files == nil {
					files = []zeish.FileInfo{}
				}
				return a.printJSON(api.FileList{Files: files})
			}
			tw := table(a.out, "MODE", "SIZE", "MODIFIED", "NAME")
			for _, fi := range files {
				row(tw, fi.Mode, fi.Size, fi.ModTime.Local().Format("2006-01-02 15:04"), displayName(fi))
			}
			return tw.Flush()
		}),
	}
}

func displayName(fi zeish.FileInfo) string {
	switch {
	case fi.Symlink != "":
		return fi.Name + " -> " + fi.Symlink
	case fi.IsDir:
		return fi.Name + "/"
	}
	return fi.Name
}

func (a *app) statCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stat ID PATH",
		Short: "Describe one file",
		Args:  cobra.ExactArgs(2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			fi, err := conn.Stat(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(fi)
			}
			tw := table(a.out, "Path:", fi.Path)
			row(tw, "Size:", fi.Size)
			row(tw, "Mode:", fmt.Sprintf("%s (%04o)", fi.Mode, fi.Perm))
			row(tw, "Modified:", fi.ModTime.Local().Format("2006-01-02 15:04:05"))
			if fi.Symlink != "" {
				row(tw, "Target:", fi.Symlink)
			}
			return tw.Flush()
		}),
	}
}

func (a *app) mkdirCmd() *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:   "mkdir ID PATH",
		Short: "Create a directory",
		Args:  cobra.ExactArgs(2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			fi, err := conn.Mkdir(cmd.Context(), args[0], parents)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(fi)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; no error if it exists")
	return cmd
}

func (a *app) rmCmd() *cobra.Command {
	var recursive, force bool
	cmd := &cobra.Command{
		Use:   "rm ID PATH",
		Short: "Remove a file (or with -r a directory tree)",
		Args:  cobra.ExactArgs(2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			err := conn.Remove(cmd.Context(), args[0], recursive)
			if force && errors.Is(err, errdefs.ErrFileNotFound) {
				return nil
			}
			return err
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "no error if the path does not exist")
	return cmd
}
