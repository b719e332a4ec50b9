package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/api"
	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) templatesCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "templates",
		Aliases: []string{"template", "tpl"},
		Short:   "Build templates from container images; list and delete them",
	})
	cmd.AddCommand(a.templateBuildCmd(), a.templateListCmd(), a.templateGetCmd(), a.templateDeleteCmd())
	return cmd
}

func (a *app) templateBuildCmd() *cobra.Command {
	var (
		req           api.BuildTemplateRequest
		from          string
		startCmd      string
		readyCmd      string
		noWait        bool
		passwordStdin bool
	)
	cmd := &cobra.Command{
		Use:   "build --name NAME --from TRANSPORT:REF",
		Short: "Build a template from an image (uploads archives; waits with progress)",
		Long: `Build a template from a container image. --from is one of
  docker-archive:PATH   a 'docker save' tar, uploaded
  oci-archive:PATH      an OCI image layout as a tar, uploaded
  oci:DIR               an OCI image layout folder, uploaded as a tar
  registry:HOST/REPO:TAG pulled by the server (--registry-secret NAME, the name of
                        an account secret stored with 'zeishctl secrets set NAME'
                        holding user:password or a token; or --username, --password-stdin)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if startCmd != "" {
				req.StartCmd = []string{"/bin/sh", "-c", startCmd}
			}
			if readyCmd != "" {
				req.ReadyCmd = []string{"/bin/sh", "-c", readyCmd}
			}
			if passwordStdin {
				b, err := io.ReadAll(io.LimitReader(a.in, 4096))
				if err != nil {
					return err
				}
				req.Password = strings.TrimRight(string(b), "\r\n")
			}
			t, err := a.sdk().BuildTemplateFrom(cmd.Context(), req, from)
			if err != nil {
				return err
			}
			if noWait {
				return a.printTemplate(t)
			}
			fmt.Fprintf(a.err, "building template %s (%s)\n", termSafe(t.Name), t.ID)
			t, err = a.sdk().WaitTemplate(cmd.Context(), t.ID, a.templateProgress)
			if err != nil {
				return err
			}
			if err := a.printTemplate(t); err != nil {
				return err
			}
			if t.State != zeish.TemplateReady {
				return fmt.Errorf("template %s: %s: %s", t.ID, t.State, t.StateReason)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "template name, unique in the account (required)")
	f.StringVar(&from, "from", "", "image source: docker-archive:PATH, oci-archive:PATH, oci:DIR or registry:REF (required)")
	f.StringVar(&startCmd, "start-cmd", "", "shell command started at every boot (default the image's Entrypoint + Cmd)")
	f.StringVar(&readyCmd, "ready-cmd", "", "shell command that succeeds once the start command is ready")
	f.IntVar(&req.DiskMiB, "disk-mib", 0, "root filesystem size in MiB (default 1024)")
	f.IntVar(&req.ReadyTimeoutSeconds, "ready-timeout", 0, "seconds to wait for --ready-cmd to succeed while warming (default 600)")
	f.BoolVar(&req.Cold, "cold", false, "always cold-boot sandboxes from this template")
	f.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory of the warm machine: sandboxes of this size start warm, others boot cold (default the default size's)")
	f.IntVar(&req.VCPUs, "vcpus", 0, "vCPUs of the warm machine (default the default size's)")
	f.StringVar(&req.Username, "username", "", "registry user (basic auth)")
	f.BoolVar(&passwordStdin, "password-stdin", false, "read the registry password from stdin")
	f.StringVar(&req.RegistrySecret, "registry-secret", "", "account secret holding the registry's credentials (user:password or a token; see 'secrets set')")
	f.BoolVar(&noWait, "no-wait", false, "return once the build started")
	cmd.MarkFlagRequired("name")
	cmd.MarkFlagRequired("from")
	return cmd
}

// templateProgress draws build progress on stderr: one redrawn line on a
// terminal, else one line per step.
func (a *app) templateProgress(e zeish.TemplateEvent) {
	line := e.Message
	if p := e.Progress; p != nil {
		switch {
		case p.Step == "layer" && p.Total > 0 && p.Message == "":
			pct := 100 * p.Bytes / p.Total
			line = fmt.Sprintf("layer %d/%d %s/%s %3d%% %s", p.Layer, p.Layers, byteSize(p.Bytes), byteSize(p.Total), pct, bar(pct))
		case p.Message != "":
			line = p.Step + ": " + p.Message
		default:
			line = p.Step
		}
	}
	if e.Type == "state" && e.Template != nil {
		line = "state: " + string(e.Template.State)
		if e.Template.StateReason != "" {
			line += " (" + e.Template.StateReason + ")"
		}
	}
	if line == "" {
		return
	}
	line = termSafe(line) // build output and reasons come from the image and its builder
	if a.errIsTerminal {
		fmt.Fprintf(a.err, "\r\033[K%s", line)
		if e.Type == "state" {
			fmt.Fprintf(a.err, "\n")
		}
		return
	}
	fmt.Fprintf(a.err, "%s\n", line)
}

func bar(pct int64) string {
	n := int(pct / 5)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", 20-n) + "]"
}

func (a *app) templateListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your templates and the built-ins",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := a.sdk().ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				if list == nil {
					list = []zeish.Template{}
				}
				return a.printJSON(api.TemplateList{Templates: list})
			}
			return a.printTemplates(list)
		},
	}
}

func (a *app) templateGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get TEMPLATE",
		Short: "Show one template (id or name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.sdk().GetTemplate(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printTemplate(t)
		},
	}
}

func (a *app) templateDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete TEMPLATE",
		Aliases: []string{"rm"},
		Short:   "Delete a template (sandboxes using it keep working)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.sdk().DeleteTemplate(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printTemplate(t)
		},
	}
}

func (a *app) printTemplates(list []zeish.Template) error {
	tw := table(a.out, "ID", "NAME", "STATE", "SOURCE", "DISK", "CREATED")
	for _, t := range list {
		src := t.Source
		if t.Builtin {
			src = "built-in"
		}
		row(tw, t.ID, t.Name, t.State, src, fmt.Sprintf("%dMiB", t.DiskMiB), age(t.CreatedAt))
	}
	return tw.Flush()
}

func (a *app) printTemplate(t zeish.Template) error {
	if a.json() {
		return a.printJSON(t)
	}
	if err := a.printTemplates([]zeish.Template{t}); err != nil {
		return err
	}
	if t.StateReason != "" {
		fmt.Fprintf(a.out, "reason: %s\n", termSafe(t.StateReason))
	}
	return nil
}
