package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// secretsCmd manages account secrets: values stored sealed on the server
// and named in requests (templates build --registry-secret).
func (a *app) secretsCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "Store account secrets (write-only) that requests name, e.g. registry credentials",
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "set NAME",
		Short: "Store a secret read from stdin (registry credentials: user:password, or a token)",
		Long: `Store a secret, read from stdin (never from an argument, so it stays out of
shell history). For templates build --registry-secret the value is
"user:password" (basic auth) or a token without a colon (bearer).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := io.ReadAll(io.LimitReader(a.in, 64<<10+1))
			if err != nil {
				return err
			}
			s, err := a.sdk().PutSecret(cmd.Context(), args[0], strings.TrimRight(string(b), "\r\n"))
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(s)
			}
			fmt.Fprintf(a.out, "secret %s stored\n", termSafe(s.Name))
			return nil
		},
	}, &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the account's secrets (names only)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := a.sdk().ListSecrets(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(list)
			}
			tw := table(a.out, "NAME", "UPDATED")
			for _, s := range list {
				row(tw, s.Name, s.UpdatedAt)
			}
			return tw.Flush()
		},
	}, &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a secret",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.sdk().DeleteSecret(cmd.Context(), args[0])
		},
	})
	return cmd
}
