package cli

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// networkFlags are the network options of create (and clone).
type networkFlags struct {
	egress      string
	allow, deny []string
	off         bool
	rateBytes   int64
	ratePackets int64
}

func (nf *networkFlags) add(f *pflag.FlagSet) {
	f.StringVar(&nf.egress, "egress", "", "where traffic no rule names goes: allow (default) or deny")
	f.StringArrayVar(&nf.allow, "allow", nil, "egress rule: IPv4 address, CIDR, domain or *.domain (repeatable)")
	f.StringArrayVar(&nf.deny, "deny", nil, "egress rule that wins over --allow (repeatable)")
	f.BoolVar(&nf.off, "no-network", false, "no network card at all")
	f.Int64Var(&nf.rateBytes, "rate-bytes", 0, "cap in bytes per second, each way (0: the node's default)")
	f.Int64Var(&nf.ratePackets, "rate-packets", 0, "cap in packets per second, each way (0: the node's default)")
}

// request is the network part of the call, nil when no flag was given.
func (nf *networkFlags) request() *api.NetworkRequest {
	if nf.egress == "" && nf.allow == nil && nf.deny == nil && !nf.off && nf.rateBytes == 0 && nf.ratePackets == 0 {
		return nil
	}
	r := &api.NetworkRequest{Egress: sandbox.Egress(nf.egress), Allow: nf.allow, Deny: nf.deny,
		RateBytes: nf.rateBytes, RatePackets: nf.ratePackets}
	if nf.off {
		off := false
		r.Enabled = &off
	}
	return r
}

func (a *app) networkCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "network",
		Aliases: []string{"net"},
		Short:   "Show or change a sandbox's egress policy",
	})
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show a sandbox's address and egress policy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.sdk().GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printNetwork(sb)
		},
	}
	var req api.NetworkPolicyRequest
	var egress string
	var clearAllow, clearDeny bool
	var rateBytes, ratePackets int64
	set := &cobra.Command{
		Use:   "set ID",
		Short: "Change a sandbox's egress policy while it runs (each option given replaces that part)",
		Example: "  zeishctl network set SBX --egress deny --allow pypi.org --allow '*.pythonhosted.org'\n" +
			"  zeishctl network set SBX --clear-deny",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Egress = sandbox.Egress(egress)
			if clearAllow {
				req.Allow = []string{}
			}
			if clearDeny {
				req.Deny = []string{}
			}
			if f := cmd.Flags().Lookup("rate-bytes"); f.Changed {
				req.RateBytes = &rateBytes
			}
			if f := cmd.Flags().Lookup("rate-packets"); f.Changed {
				req.RatePackets = &ratePackets
			}
			sb, err := a.sdk().SetNetwork(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return a.printNetwork(sb)
		},
	}
	f := set.Flags()
	f.StringVar(&egress, "egress", "", "allow or deny: where traffic no rule names goes")
	f.StringArrayVar(&req.Allow, "allow", nil, "allow rule (repeatable; replaces the allow list)")
	f.StringArrayVar(&req.Deny, "deny", nil, "deny rule (repeatable; replaces the deny list)")
	f.BoolVar(&clearAllow, "clear-allow", false, "empty the allow list")
	f.BoolVar(&clearDeny, "clear-deny", false, "empty the deny list")
	f.Int64Var(&rateBytes, "rate-bytes", 0, "cap in bytes per second, each way (0: the node's default)")
	f.Int64Var(&ratePackets, "rate-packets", 0, "cap in packets per second, each way (0: the node's default)")
	cmd.AddCommand(get, set)
	return cmd
}

func (a *app) printNetwork(sb zeish.Sandbox) error {
	if a.json() {
		return a.printJSON(sb)
	}
	tw := table(a.out, "ID:", sb.ID)
	row(tw, "Address:", sb.Address)
	n := sb.Network
	switch {
	case n == nil:
		row(tw, "Network:", "none on this node (ZEISH_NET=off)")
	case !n.Enabled:
		row(tw, "Network:", "no network card")
	default:
		row(tw, "Egress:", string(n.Egress))
		row(tw, "Allow:", strings.Join(n.Allow, ", "))
		row(tw, "Deny:", strings.Join(n.Deny, ", "))
		row(tw, "Rate:", rate(n.RateBytes, "bytes/s")+", "+rate(n.RatePackets, "packets/s"))
	}
	return tw.Flush()
}

func rate(v int64, unit string) string {
	if v == 0 {
		return "uncapped " + unit
	}
	return strconv.FormatInt(v, 10) + " " + unit
}
