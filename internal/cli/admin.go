package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/api"
	zeish "github.com/zeish/zeish/sdk/go"
)

// adminCmd is `zeishctl admin accounts|keys …` (admin keys only).
func (a *app) adminCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "admin", Short: "Manage accounts and their API keys (admin key only)"})
	accounts := group(&cobra.Command{Use: "accounts", Short: "Create and list accounts"})
	accounts.AddCommand(&cobra.Command{
		Use:   "create NAME",
		Short: "Create an account",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			acc, err := a.sdk().CreateAccount(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(acc)
			}
			a.printf("%s\n", acc.ID)
			return nil
		},
	}, &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List accounts",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := a.sdk().ListAccounts(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(list)
			}
			tw := table(a.out, "ID", "NAME", "ADMIN", "CREATED")
			for _, acc := range list {
				row(tw, acc.ID, acc.Name, acc.Admin, age(acc.CreatedAt))
			}
			return tw.Flush()
		},
	})
	keys := a.keysCmd()
	cmd.AddCommand(accounts, keys)
	return cmd
}

// keysCmd is `zeishctl admin keys …`; it is also reachable as `zeishctl keys …`.
func (a *app) keysCmd() *cobra.Command {
	keys := group(&cobra.Command{Use: "keys", Short: "Create, list and revoke API keys (admin key only)"})
	keys.AddCommand(&cobra.Command{
		Use:   "create ACCOUNT_ID",
		Short: "Create an API key for an account; it is shown this once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.sdk().CreateAPIKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(k)
			}
			a.printf("%s\n", k.Key)
			fmt.Fprintf(a.err, "key %s for %s: store it now, it is not shown again\n", k.ID, k.AccountID)
			fmt.Fprintf(a.err, "the same key for E2B's SDKs (E2B_API_KEY): %s\n", k.E2BKey)
			return nil
		},
	})
	keys.AddCommand(&cobra.Command{
		Use:   "e2b [KEY]",
		Short: "Print a key in the form E2B's SDKs accept (e2b_…; the same key); the CLI's own key by default",
		Long: "E2B's SDKs before 2.46 refuse a key that is not e2b_ and hex digits. Every zeish key has that form too: " +
			"the same bytes in hex. It is computed here, nothing is asked of the server; revoking the key revokes both forms.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := a.apiKey
			if len(args) == 1 {
				key = args[0]
			}
			if key == "" {
				var err error
				if key, err = zeish.KeyFromEnv(); err != nil {
					return err
				}
			}
			e2b, err := api.E2BKey(key)
			if err != nil {
				return err
			}
			a.printf("%s\n", e2b)
			return nil
		},
	})
	var account string
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List API keys (never the keys themselves)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := a.sdk().ListAPIKeys(cmd.Context(), account)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(list)
			}
			tw := table(a.out, "ID", "ACCOUNT", "PREFIX", "CREATED", "REVOKED")
			for _, k := range list {
				revoked := "-"
				if k.RevokedAt != nil {
					revoked = k.RevokedAt.Format(time.RFC3339)
				}
				row(tw, k.ID, k.AccountID, k.Prefix+"…", age(k.CreatedAt), revoked)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&account, "account", "", "only this account's keys")
	keys.AddCommand(list, &cobra.Command{
		Use:   "revoke KEY_ID",
		Short: "Revoke an API key: it stops working at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := a.sdk().RevokeAPIKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(k)
			}
			a.printf("revoked %s\n", k.ID)
			return nil
		},
	})
	return keys
}

// micros shows micro-dollars as dollars.
func micros(m int64) string { return fmt.Sprintf("$%.6f", float64(m)/1e6) }

func (a *app) usageCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show the account's usage and cost, per sandbox and in total",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f, t time.Time
			var err error
			if from != "" {
				if f, err = time.Parse(time.RFC3339, from); err != nil {
					return usageErrorf("--from: want an RFC 3339 time: %v", err)
				}
			}
			if to != "" {
				if t, err = time.Parse(time.RFC3339, to); err != nil {
					return usageErrorf("--to: want an RFC 3339 time: %v", err)
				}
			}
			rep, err := a.sdk().Usage(cmd.Context(), f, t)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(rep)
			}
			tw := table(a.out, "SANDBOX", "NAME", "STATE", "RUNNING", "VCPU-S", "GIB-S", "DISK GIB-S", "NET IN", "NET OUT", "COST")
			for _, u := range rep.Sandboxes {
				row(tw, u.SandboxID, u.Name, u.State, (time.Duration(u.Usage.RunningSeconds) * time.Second).String(),
					fmt.Sprintf("%.0f", u.Usage.VCPUSeconds), fmt.Sprintf("%.0f", u.Usage.MemoryGiBSeconds),
					fmt.Sprintf("%.0f", u.Usage.DiskGiBSeconds), byteSize(int64(u.Usage.NetInBytes)), byteSize(int64(u.Usage.NetOutBytes)), micros(u.Usage.CostMicros))
			}
			row(tw, "TOTAL", "", "", (time.Duration(rep.Total.RunningSeconds) * time.Second).String(),
				fmt.Sprintf("%.0f", rep.Total.VCPUSeconds), fmt.Sprintf("%.0f", rep.Total.MemoryGiBSeconds),
				fmt.Sprintf("%.0f", rep.Total.DiskGiBSeconds), byteSize(int64(rep.Total.NetInBytes)), byteSize(int64(rep.Total.NetOutBytes)), micros(rep.Total.CostMicros))
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "start of the window (RFC 3339); default the first sandbox")
	cmd.Flags().StringVar(&to, "to", "", "end of the window (RFC 3339); default now")
	return cmd
}

func (a *app) costCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "cost", Short: "Estimate what sandboxes cost"})
	var req zeish.EstimateRequest
	est := &cobra.Command{
		Use:   "estimate",
		Short: "Estimate the cost of N sandboxes of one size running for some minutes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := a.sdk().EstimatePrice(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(e)
			}
			a.printf("%d × (%d vCPU, %d MiB, %d MiB disk) for %d min: %s (compute %s, storage %s)\n",
				e.Sandboxes, e.VCPUs, e.MemoryMiB, e.DiskMiB, e.Minutes, micros(e.Usage.CostMicros),
				micros(e.Usage.ComputeMicros), micros(e.Usage.StorageMicros))
			return nil
		},
	}
	f := est.Flags()
	f.IntVar(&req.Sandboxes, "sandboxes", 0, "how many sandboxes (default 1)")
	f.StringVar(&req.Size, "size", "", "size preset: small, medium, large (default small)")
	f.IntVar(&req.VCPUs, "vcpus", 0, "vCPUs of each (overrides the preset)")
	f.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory of each in MiB (overrides the preset)")
	f.IntVar(&req.DiskMiB, "disk-mib", 0, "disk of each in MiB (overrides the preset)")
	f.IntVar(&req.Minutes, "minutes", 0, "for how long (default 60)")
	cmd.AddCommand(est)
	return cmd
}
