package deploy_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// zeishdEnv is every ZEISH_* variable zeishd's sources name: a manifest
// that sets another is a typo or a setting that does not exist.
func zeishdEnv(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`"(ZEISH_[A-Z0-9_]+)"`)
	known := map[string]bool{}
	for _, dir := range []string{"../cmd/zeishd", "../internal"} {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			for _, m := range re.FindAllSubmatch(b, -1) {
				known[string(m[1])] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return known
}

// subcommands are the roles zeishd runs in a multi-host deployment.
var subcommands = []string{"control", "node"}

// zeishd's configuration defines each role the manifests run.
func TestRolesExist(t *testing.T) {
	b, err := os.ReadFile("../internal/config/config.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range subcommands {
		if !regexp.MustCompile(`Role\w+\s*=\s*"` + role + `"`).Match(b) {
			t.Errorf("zeishd has no role %q", role)
		}
	}
}

// Every Kubernetes document decodes into its kind's type with no unknown
// field, and the set hangs together: selectors match, secrets exist, the
// control plane is replicated, node agents get /dev/kvm.
func TestKubernetesManifests(t *testing.T) {
	env := zeishdEnv(t)
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests in kubernetes/")
	}
	var (
		deployments []*appsv1.Deployment
		daemonsets  []*appsv1.DaemonSet
		services    []*corev1.Service
		secrets     = map[string]*corev1.Secret{}
	)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(b) {
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 Service":
				s := &corev1.Service{}
				obj, services = s, append(services, s)
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				obj, deployments = d, append(deployments, d)
			case "apps/v1 DaemonSet":
				d := &appsv1.DaemonSet{}
				obj, daemonsets = d, append(daemonsets, d)
			default:
				t.Fatalf("%s #%d: unexpected %s %s", f, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s #%d (%s): %v", f, i, head.Kind, err)
			}
			if s, ok := obj.(*corev1.Secret); ok {
				secrets[s.Name] = s // known by name only once decoded
			}
		}
	}
	if len(deployments) != 1 || len(daemonsets) != 1 {
		t.Fatalf("want one Deployment (control plane) and one DaemonSet (node agents), got %d and %d", len(deployments), len(daemonsets))
	}
	control, nodes := deployments[0], daemonsets[0]
	if control.Spec.Replicas == nil || *control.Spec.Replicas < 2 {
		t.Error("the control plane should run at least two replicas")
	}
	checkPod(t, "control plane", control.Spec.Selector.MatchLabels, control.Spec.Template, "control", env, secrets)
	checkPod(t, "node agent", nodes.Spec.Selector.MatchLabels, nodes.Spec.Template, "node", env, secrets)
	c := nodes.Spec.Template.Spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("node agents run VMs, TAPs and nftables: they must be privileged")
	}
	if !nodes.Spec.Template.Spec.HostNetwork {
		t.Error("node agents must be on the host's network (TAP devices, the data plane on the host's address)")
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/dev/kvm" }) {
		t.Error("node agents must mount /dev/kvm")
	}
	if nodes.Spec.Template.Spec.NodeSelector["zeish.dev/kvm"] != "true" {
		t.Error("node agents must be placed only on hosts labelled zeish.dev/kvm=true")
	}
	for _, s := range services {
		if !subset(s.Spec.Selector, control.Spec.Template.Labels) {
			t.Errorf("service %s selects %v, which no control-plane pod carries", s.Name, s.Spec.Selector)
		}
	}
}

// checkPod checks what every zeish pod needs: its selector matches its
// labels, it runs zeishd in role, and every variable and secret it names
// exists.
func checkPod(t *testing.T, what string, selector map[string]string, tpl corev1.PodTemplateSpec, role string, env map[string]bool, secrets map[string]*corev1.Secret) {
	t.Helper()
	if len(selector) == 0 || !subset(selector, tpl.Labels) {
		t.Errorf("%s: selector %v does not match its pod labels %v", what, selector, tpl.Labels)
	}
	if len(tpl.Spec.Containers) != 1 {
		t.Fatalf("%s: want one container, got %d", what, len(tpl.Spec.Containers))
	}
	c := tpl.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != role {
		t.Errorf("%s: args %v, want zeishd %s", what, c.Args, role)
	}
	for _, e := range c.Env {
		// Other names only feed $(NAME) expansion in later values.
		if strings.HasPrefix(e.Name, "ZEISH_") && !env[e.Name] {
			t.Errorf("%s: %s is not a setting zeishd reads", what, e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			s := secrets[ref.Name]
			if s == nil {
				t.Errorf("%s: %s reads secret %s, which no manifest defines", what, e.Name, ref.Name)
			} else if _, ok := s.StringData[ref.Key]; !ok {
				t.Errorf("%s: %s reads key %s of secret %s, which it lacks", what, e.Name, ref.Key, ref.Name)
			}
		}
	}
	for _, v := range tpl.Spec.Volumes {
		if v.Secret != nil && secrets[v.Secret.SecretName] == nil {
			t.Errorf("%s: volume %s mounts secret %s, which no manifest defines", what, v.Name, v.Secret.SecretName)
		}
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		vars[e.Name] = e.Value
	}
	checkHostSecurity(t, what, role, vars)
	for _, v := range tpl.Spec.Volumes {
		if role == "node" && v.Secret != nil && (v.Secret.SecretName == "zeish-keys" || v.Secret.SecretName == "zeish") {
			t.Errorf("%s: mounts the control plane's secret %s (keys, database): a node must hold no key that opens other accounts' secrets, nor the database", what, v.Secret.SecretName)
		}
	}
	for _, e := range c.Env {
		if role == "node" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "zeish" {
			t.Errorf("%s: %s reads the control plane's secret zeish (the database URL): a node agent opens no database", what, e.Name)
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil && p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s: a probe over %q on a listener that serves TLS", what, p.HTTPGet.Scheme)
		}
	}
}

// checkHostSecurity checks what a role's settings must hold between hosts
// (SECURITY.md, node identity): TLS with the cluster's CA, https URLs
// only, no shared node token; a node joins with a join token of its own.
func checkHostSecurity(t *testing.T, what, role string, vars map[string]string) {
	t.Helper()
	for _, name := range []string{"ZEISH_TLS_CERT", "ZEISH_TLS_KEY", "ZEISH_CLUSTER_CA"} {
		if vars[name] == "" {
			t.Errorf("%s: no %s: hosts must talk TLS off a private network", what, name)
		}
	}
	if vars["ZEISH_CLUSTER_ALLOW_HTTP"] == "on" {
		t.Errorf("%s: ZEISH_CLUSTER_ALLOW_HTTP=on in a deployment example", what)
	}
	if _, ok := vars["ZEISH_NODE_TOKEN"]; ok {
		t.Errorf("%s: ZEISH_NODE_TOKEN: there is no shared node token; nodes join with a join token each", what)
	}
	for _, name := range []string{"ZEISH_CONTROL_URL", "ZEISH_NODE_URL"} {
		for _, u := range strings.Split(vars[name], ",") {
			if u != "" && !strings.HasPrefix(u, "https://") {
				t.Errorf("%s: %s=%s is not https://", what, name, u)
			}
		}
	}
	if _, ok := vars["ZEISH_DATABASE_URL"]; ok && role == "node" {
		t.Errorf("%s: ZEISH_DATABASE_URL: a node agent opens no database (node protocol 2.3; docs/cluster.md): its host must not hold the credentials", what)
	}
	if role == "node" && vars["ZEISH_JOIN_TOKEN"] == "" && vars["ZEISH_JOIN_TOKEN_FILE"] == "" {
		t.Errorf("%s: neither ZEISH_JOIN_TOKEN nor ZEISH_JOIN_TOKEN_FILE: the node could not join", what)
	}
}

func subset(sub, of map[string]string) bool {
	for k, v := range sub {
		if of[k] != v {
			return false
		}
	}
	return true
}

// splitYAML splits a multi-document file on its "---" lines.
func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if strings.TrimSpace(stripComments(cur.String())) != "" {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "---" {
			flush()
			continue
		}
		cur.WriteString(sc.Text() + "\n")
	}
	flush()
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// unitKeys are the directives our units may use, by section: a key
// outside them is a typo systemd would ignore with only a warning.
var unitKeys = map[string][]string{
	"Unit": {"Description", "Documentation", "Wants", "After", "Requires", "Before"},
	"Service": {"Type", "EnvironmentFile", "ExecStart", "Restart", "RestartSec", "DynamicUser", "StateDirectory",
		"NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "LimitNOFILE", "LimitMEMLOCK", "User",
		"KillMode", "TimeoutStopSec", "Delegate"},
	"Install": {"WantedBy"},
}

// The systemd units parse strictly (known sections and directives, our own
// check and systemd-analyze's where the host has it), run zeishd in a known
// role, and their environment files set only settings zeishd reads.
func TestSystemdUnits(t *testing.T) {
	env := zeishdEnv(t)
	units, _ := filepath.Glob("systemd/*.service")
	if len(units) != 2 {
		t.Fatalf("want the control-plane and node units, got %v", units)
	}
	for _, u := range units {
		kv := parseUnit(t, u)
		role, ok := strings.CutPrefix(kv["Service.ExecStart"], "/usr/local/bin/zeishd ")
		if !ok || !slices.Contains(subcommands, role) {
			t.Errorf("%s: ExecStart %q does not run zeishd in a known role", u, kv["Service.ExecStart"])
		}
		envFile := filepath.Join("systemd", filepath.Base(kv["Service.EnvironmentFile"]))
		b, err := os.ReadFile(envFile)
		if err != nil {
			t.Errorf("%s: its EnvironmentFile has no example in systemd/: %v", u, err)
			continue
		}
		vars := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			name, value, ok := strings.Cut(l, "=")
			if !ok || !env[name] {
				t.Errorf("%s: %q is not a setting zeishd reads", envFile, l)
			}
			vars[name] = value
		}
		checkHostSecurity(t, envFile, role, vars)
		if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
			out, _ := exec.Command(analyze, "verify", u).CombinedOutput()
			for _, l := range strings.Split(string(out), "\n") {
				// The binary is not installed on a test host; anything else
				// (unknown keys, bad values) is a fault of the unit.
				if l != "" && !strings.Contains(l, "is not executable") {
					t.Errorf("systemd-analyze verify %s: %s", u, l)
				}
			}
		}
	}
}

// parseUnit reads an INI-style unit, refusing sections and keys outside
// unitKeys; it returns "Section.Key" → value.
func parseUnit(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	section := ""
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
			if _, ok := unitKeys[section]; !ok {
				t.Errorf("%s:%d: unknown section [%s]", path, i+1, section)
			}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				t.Errorf("%s:%d: not a key=value line in a section: %q", path, i+1, l)
				continue
			}
			if !slices.Contains(unitKeys[section], k) {
				t.Errorf("%s:%d: %s= is not a directive our units use in [%s]", path, i+1, k, section)
			}
			kv[section+"."+k] = v
		}
	}
	return kv
}
