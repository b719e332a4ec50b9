package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// initMarker is in every line sandboxd's init (PID 1) logs to /dev/console:
// slog's text handler with .With("component", "init"). Its earliest line is
// "agent started" (or a lo / resize2fs line just before it), printed once
// the API file systems are mounted, right after switch_root; the kernel
// itself says nothing on the console with "quiet loglevel=1" (emergencies only).
const initMarker = "component=init"

// rawBoot is one boot of the base template by QEMU alone.
type rawBoot struct {
	ToInit      time.Duration // exec → init's first console line
	FirstOutput time.Duration // exec → first byte on the console
}

var rawSeq atomic.Int64

func rawMemGlob() string { return fmt.Sprintf("/dev/shm/zeish-bench-%d-*.mem", os.Getpid()) }

// bootRaw launches qemu-system-x86_64 the way the driver does
// (vmm/qemu/cmdline.go: q35 with guest RAM in a share=on memory-backend-file
// on /dev/shm, virtio-blk on a fresh qcow2 overlay of the base disk, the
// virtio-serial agent port, user-mode virtio-net restrict=on, virtio-rng, the
// same accelerator and TCG cache) but in the foreground, with the console on
// a pipe, and times it until init's first line. QEMU is then killed and
// every file removed. The overlay is made before the clock starts.
func (e *benchEnv) bootRaw(ctx context.Context, memMiB, vcpus, diskMiB int) (rawBoot, error) {
	return e.bootRawWith(ctx, rawOpts{memMiB: memMiB, vcpus: vcpus, diskMiB: diskMiB}, nil)
}

// rawOpts vary a raw boot: netdev replaces the user-mode network (e.g. a
// TAP), netns runs QEMU in that network namespace.
type rawOpts struct {
	memMiB, vcpus, diskMiB int
	netdev                 string
	netns                  string
	// started, when not nil, runs with QEMU's pid as soon as it started;
	// its undo runs after QEMU is gone.
	started func(pid int) (undo func(), err error)
}

// bootRawWith is bootRaw with options; then, when not nil, runs once init's
// first line is seen, while the VM still runs, with the folder holding the
// agent's socket (agent.sock).
func (e *benchEnv) bootRawWith(ctx context.Context, o rawOpts, then func(dir string) error) (rawBoot, error) {
	memMiB, vcpus, diskMiB := o.memMiB, o.vcpus, o.diskMiB
	n := rawSeq.Add(1)
	dir := filepath.Join(e.tmp, fmt.Sprintf("raw-%d", n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return rawBoot{}, err
	}
	defer os.RemoveAll(dir)
	memFile := fmt.Sprintf("/dev/shm/zeish-bench-%d-%d.mem", os.Getpid(), n)
	defer os.Remove(memFile)

	disk := filepath.Join(dir, "disk.qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2",
		"-b", e.tpl.BaseDisk, "-F", "qcow2", disk, strconv.Itoa(diskMiB)+"M").CombinedOutput()
	if err != nil {
		return rawBoot{}, fmt.Errorf("qemu-img create: %w: %s", err, out)
	}

	netdev := "user,id=net0,restrict=on"
	if o.netdev != "" {
		netdev = o.netdev
	}
	accel := e.accel
	if accel == "tcg" {
		accel += ",tb-size=128" // as zeishd configures its driver
	}
	args := []string{
		"-name", "zeish-bench-raw",
		"-nodefaults", "-no-user-config",
		"-display", "none", "-vga", "none",
		"-no-reboot",
		"-machine", "q35,memory-backend=mem",
		"-accel", accel,
	}
	if e.accel == "kvm" {
		args = append(args, "-cpu", "host")
	}
	args = append(args,
		"-smp", strconv.Itoa(vcpus),
		"-m", fmt.Sprintf("%dM", memMiB),
		"-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=on", memMiB, memFile),
		"-kernel", e.tpl.Kernel,
		"-initrd", e.tpl.Initrd,
		"-append", e.tpl.KernelArgs,
		"-blockdev", "driver=file,node-name=disk0-file,filename="+disk,
		"-blockdev", "driver=qcow2,node-name=disk0,file=disk0-file",
		"-device", "virtio-blk-pci,drive=disk0,id=vda",
		"-chardev", "socket,id=qmp,path="+filepath.Join(dir, "qmp.sock")+",server=on,wait=off",
		"-mon", "chardev=qmp,mode=control",
		"-chardev", "socket,id=agent,path="+filepath.Join(dir, "agent.sock")+",server=on,wait=off",
		"-device", "virtio-serial-pci,id=vser0",
		"-device", "virtserialport,chardev=agent,name=agent",
		"-netdev", netdev,
		"-device", "virtio-net-pci,netdev=net0",
		"-device", "virtio-rng-pci",
		"-serial", "stdio",
	)

	console, consoleW, err := os.Pipe()
	if err != nil {
		return rawBoot{}, err
	}
	defer console.Close()
	var stderr bytes.Buffer
	cmd := exec.Command("qemu-system-x86_64", args...)
	if o.netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + o.netns, "qemu-system-x86_64"}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = consoleW, &stderr
	// Own process group: Ctrl-C reaches the bench, which then kills QEMU.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	type seen struct {
		first, init time.Time
		text        string
	}
	result := make(chan seen, 1)
	var undoStarted func()
	defer func() { // after QEMU is gone (deferred calls run last first)
		if undoStarted != nil {
			undoStarted()
		}
	}()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		consoleW.Close()
		return rawBoot{}, err
	}
	consoleW.Close() // QEMU holds the only write end now
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	if o.started != nil {
		if undoStarted, err = o.started(cmd.Process.Pid); err != nil {
			return rawBoot{}, err
		}
	}

	go func() {
		var s seen
		var text strings.Builder
		r := bufio.NewReader(console)
		for {
			line, err := r.ReadString('\n')
			if len(line) > 0 && s.first.IsZero() {
				s.first = time.Now()
			}
			if text.Len() < 16<<10 {
				text.WriteString(line)
			}
			if strings.Contains(line, initMarker) && strings.HasSuffix(line, "\n") {
				s.init = time.Now()
				break
			}
			if err != nil {
				break
			}
		}
		s.text = text.String()
		result <- s
		io.Copy(io.Discard, console) // keep QEMU from blocking on a full pipe
	}()

	timeout := time.NewTimer(3 * time.Minute)
	defer timeout.Stop()
	select {
	case s := <-result:
		if s.init.IsZero() {
			return rawBoot{}, fmt.Errorf("console closed before init's first line; console:\n%s\nqemu: %s", s.text, stderr.String())
		}
		b := rawBoot{ToInit: s.init.Sub(start), FirstOutput: s.first.Sub(start)}
		if then != nil {
			return b, then(dir)
		}
		return b, nil
	case err := <-exited:
		exited <- err // for the deferred wait
		return rawBoot{}, fmt.Errorf("qemu exited early: %v: %s", err, stderr.String())
	case <-timeout.C:
		return rawBoot{}, errors.New("no init line on the console within 3m")
	case <-ctx.Done():
		return rawBoot{}, ctx.Err()
	}
}
