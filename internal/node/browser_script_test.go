package node

import (
	"os/exec"
	"testing"
)

// The guest scripts parse (bash -n, python3's compile), so a quoting slip
// is caught here rather than by a VM.
func TestBrowserScriptsParse(t *testing.T) {
	for name, script := range map[string]string{"start": browserScript, "stop": browserStopScript} {
		if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("%s script: %v %s", name, err, out)
		}
	}
	if out, err := exec.Command("python3", "-c", "import sys; compile(sys.argv[1], 'forwarder', 'exec')", browserForwarder).CombinedOutput(); err != nil {
		t.Errorf("forwarder: %v %s", err, out)
	}
}
