package procscan

import (
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestFindsAChildByItsArguments(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sleep", "30.4242")
	cmd.Args[0] = dir + "/sleep" // argv[0] names a path inside dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	waitExeced(pid)
	if got := Args(pid); !slices.Equal(got, []string{dir + "/sleep", "30.4242"}) {
		t.Errorf("Args = %q", got)
	}
	if got := Mentioning("30.4242"); !slices.Equal(got, []int{pid}) {
		t.Errorf("Mentioning = %v, want [%d]", got, pid)
	}
	if got := Under(dir + "/"); !slices.Equal(got, []int{pid}) {
		t.Errorf("Under = %v, want [%d]", got, pid)
	}
	if got := Under(dir + "-other"); len(got) != 0 {
		t.Errorf("Under a sibling folder = %v, want none", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := Mentioning("30.4242"); len(got) != 0 {
		t.Errorf("after exit: Mentioning = %v", got)
	}
	if Args(pid) != nil || Args(0) != nil || Args(-1) != nil {
		t.Error("Args of a gone or invalid pid must be nil")
	}
}

// OptionValues finds an option's value inside a comma-separated argument of
// another process, and only the value (up to the next comma).
func TestOptionValues(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30", "memory-backend-file,id=mem,mem-path=/dev/shm/procscan-test.mem,share=on")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitExeced(cmd.Process.Pid)
	if got := OptionValues("mem-path"); !got["/dev/shm/procscan-test.mem"] {
		t.Fatalf("mem-path values %v lack the child's", got)
	}
}

// waitExeced waits (10 s at most) until pid shows its arguments. Start
// returns once the exec is past its point of no return, which is before the
// kernel has set up the new program's arguments: until then
// /proc/PID/cmdline is empty.
func waitExeced(pid int) {
	for deadline := time.Now().Add(10 * time.Second); len(Args(pid)) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}
