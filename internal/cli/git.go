package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/zeish/zeish/api"
)

// addGitFlags adds create's git flags (docs/git.md).
func addGitFlags(f *pflag.FlagSet, req *api.CreateSandboxRequest) {
	f.StringVar(&req.GitRepo, "git-repo", "", "clone this http(s):// or git:// repository before running (debian template; token: --secret GIT_TOKEN=…)")
	f.StringVar(&req.GitBranch, "git-branch", "", "branch to clone (default the remote's HEAD)")
	f.IntVar(&req.PRNumber, "pr-number", 0, "pull request to check out, on branch pr-N")
	f.StringVar(&req.GitPath, "git-path", "", "where to clone (default /home/user/workspace)")
	f.StringVar(&req.GitPRRef, "git-pr-ref", "", "pull ref pattern (default refs/pull/{n}/head)")
	f.StringVar(&req.GitTokenSecret, "git-token-secret", "", "the --secret holding git's token (default GIT_TOKEN)")
}

func (a *app) gitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "git ID",
		Short: "Show a sandbox's git clone: branch, HEAD and dirty files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.sdk().GitStatus(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(st)
			}
			branch := st.Branch
			if st.Detached {
				branch = "(detached)"
			}
			fmt.Fprintf(a.out, "repo    %s\npath    %s\nbranch  %s\nhead    %s\n", st.Repo, st.Path, branch, st.Head)
			if len(st.Dirty) == 0 {
				fmt.Fprintln(a.out, "clean")
				return nil
			}
			tw := table(a.out, "STATUS", "PATH")
			for _, f := range st.Dirty {
				row(tw, "["+f.Status+"]", f.Path)
			}
			if st.Truncated {
				row(tw, "…", "(more files)")
			}
			return tw.Flush()
		},
	}
}
