package cli

import (
	"time"

	"github.com/spf13/cobra"
)

func (a *app) browserCmd() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "browser ID",
		Short: "Show the DevTools (CDP) URL of a sandbox's browser, for chromedp, Puppeteer or Playwright",
		Long: `Show the DevTools (CDP) WebSocket URL of a sandbox created or forked with a
browser (--browser, on a template with the browser feature such as desktop).
The URL carries a data-plane token (valid --ttl); connect any CDP client to it.`,
		Example: "  zeishctl sandboxes create --template desktop --browser --wait --name web\n" +
			"  zeishctl browser web -o json | jq -r .cdp_url",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.sdk().Browser(cmd.Context(), args[0], ttl)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(b)
			}
			tw := table(a.out, "CDP URL:", b.CDPURL)
			row(tw, "HTTP URL:", b.HTTPURL+" (Authorization: Bearer <token>)")
			row(tw, "Browser:", b.Version+" (protocol "+b.ProtocolVersion+")")
			row(tw, "Expires:", b.ExpiresAt.Local().Format(time.RFC3339))
			return tw.Flush()
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime of the URL's token (default 15m, at most 1h); an open connection outlives it")
	return cmd
}
