package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// JoinToken makes a join token for node nodeID with `zeishd join-token`, as
// an operator does, on the cluster's database; a node agent started with
// it as ZEISH_JOIN_TOKEN joins the cluster.
func JoinToken(ctx context.Context, bin, databaseURL, nodeID string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, "join-token", "--node", nodeID, "--ttl", "1h")
	cmd.Env = append(os.Environ(), "ZEISH_DATABASE_URL="+databaseURL, "ZEISH_LOG_LEVEL=warn")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("zeishd join-token: %w: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}
