package qemu

import (
	"fmt"
	"strconv"

	"github.com/zeish/zeish/vmm"
)

// QEMU ids and node names the rest of the driver (and fork, next) refers to.
const (
	memBackendID   = "mem"                     // the guest RAM object; fork maps the same file in clones
	diskNode       = "disk0"                   // format node: the one blockdev-snapshot-sync swaps
	fileNodeSuffix = "-file"                   // a format node's protocol node is named after it
	diskFileNode   = diskNode + fileNodeSuffix // protocol node of the writable overlay
	qmpChardevID   = "qmp"
	agentChardev   = "agent"
	consoleChardev = "console"
	agentPortName  = "agent" // what the guest finds in /sys/class/virtio-ports/*/name
	netdevID       = "net0"
)

// launchConfig is everything one QEMU command line is made of. It holds
// resolved absolute paths only; buildArgs never touches the filesystem.
type launchConfig struct {
	Tag          string // "zeish-<id>": -name and thread name; Alive looks for it
	Accel        vmm.Accel
	TCGTBSizeMiB int // TCG translation cache; 0 = QEMU's default
	VCPUs        int
	MemoryMiB    int
	MemFile      string
	// MemShared maps MemFile share=on (a VM that owns its RAM file). A clone
	// started from a template maps the template's file share=off instead.
	MemShared  bool
	Kernel     string
	Initrd     string
	KernelArgs string
	Disk       string
	DiskAIO    string // aio of Disk's file node; "": QEMU's default
	MAC        string
	// TAPFD, when > 0, is the fd (in QEMU) of a queue of the VM's TAP; NoNIC
	// leaves the network card out. Neither: a user-mode card with no way out.
	TAPFD         int
	NoNIC         bool
	QMPSocket     string
	AgentSocket   string
	ConsoleLog    string
	PIDFile       string
	IncomingDefer bool // -incoming defer: wait for migrate-incoming (fork clones)
	// Seccomp filters QEMU's system calls (-sandbox): a guest that escapes
	// into the VMM meets a syscall filter, no obsolete calls and no
	// resource-limit changes.
	Seccomp bool
	// NeverStart (-S) keeps the guest's CPUs stopped even once an incoming
	// migration completes: a live capture's receiver must stay the image of
	// the switch-over instant.
	NeverStart bool
}

// sandboxArg is the -sandbox value: QEMU's default filter plus denying
// obsolete calls and resource-limit changes. spawn=deny and
// elevateprivileges=deny both make QEMU 10 fail at launch here (measured):
// its filter is in place before -daemonize forks and before -run-with
// changes to the VM user. Confinement (user, chroot, cgroup) covers those.
const sandboxArg = "on,obsolete=deny,resourcecontrol=deny"

// aioOpt is the ",aio=…" of a -blockdev file node ("" for the default).
func aioOpt(aio string) string {
	if aio == "" {
		return ""
	}
	return ",aio=" + aio
}

// nameArg is the value of -name. Alive matches it exactly in /proc/<pid>/cmdline.
func nameArg(tag string) string { return tag + ",process=" + tag }

// qmpChardevArg is the value of the QMP -chardev; its socket path is unique
// to one VM, so together with nameArg it identifies our process.
func qmpChardevArg(path string) string {
	return "socket,id=" + qmpChardevID + ",path=" + path + ",server=on,wait=off"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// buildArgs returns QEMU's argv (without argv[0]). Paths must not contain
// commas (QEMU's option separator); Start rejects such paths.
func buildArgs(c launchConfig) []string {
	accel := string(c.Accel)
	if c.Accel == vmm.AccelTCG && c.TCGTBSizeMiB > 0 {
		accel += ",tb-size=" + strconv.Itoa(c.TCGTBSizeMiB)
	}
	args := []string{
		"-name", nameArg(c.Tag),
		"-nodefaults", "-no-user-config",
		"-display", "none", "-vga", "none",
		"-no-reboot",
		// QEMU forks, setsid()s and returns only once its setup succeeded: the
		// VM outlives zeishd, and setup errors reach us on stderr.
		"-daemonize",
		"-pidfile", c.PIDFile,
		"-machine", "q35,memory-backend=" + memBackendID,
		"-accel", accel,
	}
	if c.Accel == vmm.AccelKVM {
		args = append(args, "-cpu", "host")
	}
	args = append(args,
		"-smp", strconv.Itoa(c.VCPUs),
		"-m", fmt.Sprintf("%dM", c.MemoryMiB),
		"-object", fmt.Sprintf("memory-backend-file,id=%s,size=%dM,mem-path=%s,share=%s",
			memBackendID, c.MemoryMiB, c.MemFile, onOff(c.MemShared)),
		"-kernel", c.Kernel,
	)
	if c.Initrd != "" {
		args = append(args, "-initrd", c.Initrd)
	}
	if c.KernelArgs != "" {
		args = append(args, "-append", c.KernelArgs)
	}
	nic := "virtio-net-pci,netdev=" + netdevID
	if c.MAC != "" {
		nic += ",mac=" + c.MAC
	}
	args = append(args,
		"-blockdev", "driver=file,node-name="+diskFileNode+",filename="+c.Disk+aioOpt(c.DiskAIO),
		"-blockdev", "driver=qcow2,node-name="+diskNode+",file="+diskFileNode,
		"-device", "virtio-blk-pci,drive="+diskNode+",id=vda",
		"-chardev", qmpChardevArg(c.QMPSocket),
		"-mon", "chardev="+qmpChardevID+",mode=control",
		"-chardev", "socket,id="+agentChardev+",path="+c.AgentSocket+",server=on,wait=off",
		"-device", "virtio-serial-pci,id=vser0",
		"-device", "virtserialport,chardev="+agentChardev+",name="+agentPortName,
	)
	switch {
	case c.NoNIC:
	case c.TAPFD > 0:
		// QEMU gets the TAP as an open queue: it may be chrooted and run as
		// an unprivileged user, and the TAP may be held by another VMM too.
		args = append(args, "-netdev", "tap,id="+netdevID+",fd="+strconv.Itoa(c.TAPFD), "-device", nic)
	default:
		// restrict=on: the guest reaches neither the host nor anything beyond it.
		args = append(args, "-netdev", "user,id="+netdevID+",restrict=on", "-device", nic)
	}
	args = append(args,
		"-device", "virtio-rng-pci",
		// append=on: the driver trims the log (TrimConsole) and QEMU's next
		// write lands at the new end instead of leaving a hole.
		"-chardev", "file,id="+consoleChardev+",path="+c.ConsoleLog+",append=on",
		"-serial", "chardev:"+consoleChardev,
	)
	if c.IncomingDefer {
		// No self-announcement after the load: QEMU would otherwise make
		// virtio-net ask the guest five times over ~0.5 s to announce itself
		// (gratuitous ARP, unsolicited neighbour advertisements, multicast
		// reports), each a config interrupt and kernel work that competes
		// with a fork's reconfiguration and first exec under TCG, and the
		// first ones announce the parent's address and MAC on the child's
		// TAP. Nobody listens: each TAP is a routed point-to-point link of
		// its own, and the host resolves a guest afresh on a new TAP.
		args = append(args, "-incoming", "defer", "-global", "migration.announce-rounds=0")
	}
	if c.Seccomp {
		args = append(args, "-sandbox", sandboxArg)
	}
	if c.NeverStart {
		args = append(args, "-S")
	}
	return args
}
