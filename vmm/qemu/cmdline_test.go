package qemu

import (
	"slices"
	"strings"
	"testing"

	"github.com/zeish/zeish/vmm"
)

func baseLaunchConfig() launchConfig {
	return launchConfig{
		Tag:         "zeish-sbx1",
		Accel:       vmm.AccelTCG,
		VCPUs:       2,
		MemoryMiB:   512,
		MemFile:     "/dev/shm/zeish-sbx1-ab.mem",
		MemShared:   true,
		Kernel:      "/k/vmlinuz",
		Initrd:      "/k/initrd",
		KernelArgs:  "console=ttyS0 quiet",
		Disk:        "/vm/disk.qcow2",
		MAC:         "52:54:00:aa:bb:cc",
		QMPSocket:   "/vm/qmp.sock",
		AgentSocket: "/vm/agent.sock",
		ConsoleLog:  "/vm/console.log",
		PIDFile:     "/vm/qemu.pid",
	}
}

// optionValues returns the value following each opt in args.
func optionValues(args []string, opt string) []string {
	var vals []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == opt {
			vals = append(vals, args[i+1])
		}
	}
	return vals
}

func TestBuildArgs(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*launchConfig)
		want   map[string][]string // option → values that must all be present
		absent []string            // options that must not appear
		flags  []string            // bare flags that must appear
	}{
		{
			name: "tcg default",
			want: map[string][]string{
				"-name":    {"zeish-sbx1,process=zeish-sbx1"},
				"-machine": {"q35,memory-backend=mem"},
				"-accel":   {"tcg"},
				"-smp":     {"2"},
				"-m":       {"512M"},
				"-object":  {"memory-backend-file,id=mem,size=512M,mem-path=/dev/shm/zeish-sbx1-ab.mem,share=on"},
				"-kernel":  {"/k/vmlinuz"},
				"-initrd":  {"/k/initrd"},
				"-append":  {"console=ttyS0 quiet"},
				"-blockdev": {
					"driver=file,node-name=disk0-file,filename=/vm/disk.qcow2",
					"driver=qcow2,node-name=disk0,file=disk0-file",
				},
				"-device": {
					"virtio-blk-pci,drive=disk0,id=vda",
					"virtio-serial-pci,id=vser0",
					"virtserialport,chardev=agent,name=agent",
					"virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc",
					"virtio-rng-pci",
				},
				"-chardev": {
					"socket,id=qmp,path=/vm/qmp.sock,server=on,wait=off",
					"socket,id=agent,path=/vm/agent.sock,server=on,wait=off",
					"file,id=console,path=/vm/console.log,append=on",
				},
				"-mon":     {"chardev=qmp,mode=control"},
				"-netdev":  {"user,id=net0,restrict=on"},
				"-serial":  {"chardev:console"},
				"-pidfile": {"/vm/qemu.pid"},
				"-display": {"none"},
				"-vga":     {"none"},
			},
			absent: []string{"-cpu", "-incoming", "-global", "-sandbox", "-S"},
			flags:  []string{"-nodefaults", "-no-user-config", "-no-reboot", "-daemonize"},
		},
		{
			name:   "kvm uses the host cpu",
			mutate: func(c *launchConfig) { c.Accel = vmm.AccelKVM; c.TCGTBSizeMiB = 64 },
			want:   map[string][]string{"-accel": {"kvm"}, "-cpu": {"host"}},
		},
		{
			name:   "tcg translation cache",
			mutate: func(c *launchConfig) { c.TCGTBSizeMiB = 64 },
			want:   map[string][]string{"-accel": {"tcg,tb-size=64"}},
		},
		{
			name:   "no initrd, no append, no mac",
			mutate: func(c *launchConfig) { c.Initrd, c.KernelArgs, c.MAC = "", "", "" },
			want:   map[string][]string{"-device": {"virtio-net-pci,netdev=net0"}},
			absent: []string{"-initrd", "-append"},
		},
		{
			name:   "seccomp",
			mutate: func(c *launchConfig) { c.Seccomp = true },
			want:   map[string][]string{"-sandbox": {"on,obsolete=deny,resourcecontrol=deny"}},
		},
		{
			name:   "a tap queue backs the nic",
			mutate: func(c *launchConfig) { c.TAPFD = 3 },
			want:   map[string][]string{"-netdev": {"tap,id=net0,fd=3"}, "-device": {"virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc"}},
		},
		{
			name:   "no nic at all",
			mutate: func(c *launchConfig) { c.NoNIC = true },
			absent: []string{"-netdev"},
		},
		{
			name: "clone maps the template privately and waits for its state",
			mutate: func(c *launchConfig) {
				c.MemShared = false
				c.IncomingDefer = true
			},
			want: map[string][]string{
				"-object":   {"memory-backend-file,id=mem,size=512M,mem-path=/dev/shm/zeish-sbx1-ab.mem,share=off"},
				"-incoming": {"defer"},
				// A loaded guest is not asked to announce itself (on its
				// own routed TAP nobody listens).
				"-global": {"migration.announce-rounds=0"},
			},
		},
		{
			name: "a live capture's receiver owns its new file and never starts",
			mutate: func(c *launchConfig) {
				c.IncomingDefer, c.NeverStart = true, true
			},
			want:  map[string][]string{"-incoming": {"defer"}},
			flags: []string{"-S"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := baseLaunchConfig()
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			args := buildArgs(c)
			for opt, vals := range tc.want {
				got := optionValues(args, opt)
				for _, v := range vals {
					if !slices.Contains(got, v) {
						t.Errorf("%s %q missing; have %q", opt, v, got)
					}
				}
			}
			for _, opt := range tc.absent {
				if slices.Contains(args, opt) {
					t.Errorf("%s present: %q", opt, optionValues(args, opt))
				}
			}
			for _, f := range tc.flags {
				if !slices.Contains(args, f) {
					t.Errorf("flag %s missing", f)
				}
			}
			if !identityOf(c.Tag, c.QMPSocket).matches(append([]string{"qemu"}, args...)) {
				t.Errorf("argv does not carry the identity Alive looks for: %q", strings.Join(args, " "))
			}
		})
	}
}

func TestIdentityRejectsOtherVMs(t *testing.T) {
	args := append([]string{"qemu"}, buildArgs(baseLaunchConfig())...)
	for _, id := range []identity{
		identityOf("zeish-sbx2", "/vm/qmp.sock"),
		identityOf("zeish-sbx1", "/other/qmp.sock"),
		identityOf("zeish-sbx", "/vm/qmp.sock"),
	} {
		if id.matches(args) {
			t.Errorf("%+v matches a command line that is not its own", id)
		}
	}
	if (identity{name: "x", chardev: "y"}).matches(nil) {
		t.Error("identity matches an empty command line (zombie)")
	}
}

// A VM that loads an image gets the clone cache size, a booted one the
// default; an unset clone size falls back to the default (as New does).
func TestTBSizeFor(t *testing.T) {
	for _, tc := range []struct {
		name              string
		opts              Options
		boot, fromAnImage int
	}{
		{"both set", Options{TCGTBSizeMiB: 128, CloneTCGTBSizeMiB: 16}, 128, 16},
		{"clone unset", Options{TCGTBSizeMiB: 128}, 128, 128},
		{"default unset", Options{CloneTCGTBSizeMiB: 16}, 0, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Driver{tbSizeMiB: tc.opts.TCGTBSizeMiB, cloneTBSizeMiB: cloneTBSize(tc.opts)}
			if got := d.tbSizeFor(false); got != tc.boot {
				t.Errorf("booted VM: tb-size %d, want %d", got, tc.boot)
			}
			if got := d.tbSizeFor(true); got != tc.fromAnImage {
				t.Errorf("VM from an image: tb-size %d, want %d", got, tc.fromAnImage)
			}
		})
	}
}
