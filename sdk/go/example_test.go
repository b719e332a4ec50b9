package zeish_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
	zeish "github.com/zeish/zeish/sdk/go"
)

// Create a sandbox, run a command in it, and delete it.
func Example() {
	ctx := context.Background()
	client, err := zeish.NewClientFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	sb, err := client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: "base", Size: "small"}, zeish.Wait())
	if err != nil {
		log.Fatal(err)
	}
	defer client.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)

	conn, err := client.Connect(ctx, sb.ID)
	if err != nil {
		log.Fatal(err)
	}
	res, err := conn.Exec(ctx, zeish.ExecRequest{Argv: []string{"uname", "-a"}}, os.Stdout, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit code", res.ExitCode)
}

// Errors unwrap to the errdefs sentinels.
func ExampleAPIError() {
	client := zeish.NewClient(zeish.DefaultAPIURL, os.Getenv("ZEISH_API_KEY"))
	_, err := client.GetSandbox(context.Background(), "sbx_missing")
	var apiErr *zeish.APIError
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		fmt.Println("no such sandbox")
	case errors.As(err, &apiErr):
		fmt.Println("zeishd said", apiErr.Code, apiErr.Message)
	}
}

// Upload a file streamed from any reader, then read it back.
func ExampleSandboxConn_WriteFile() {
	ctx := context.Background()
	client, err := zeish.NewClientFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := client.Connect(ctx, "sbx_example")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := conn.WriteFile(ctx, "/tmp/hello.txt", strings.NewReader("hello\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	rc, err := conn.ReadFile(ctx, "/tmp/hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	_, _ = os.Stdout.ReadFrom(rc)
}

// List running sandboxes.
func ExampleClient_ListSandboxes() {
	client, err := zeish.NewClientFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	list, err := client.ListSandboxes(context.Background(), zeish.ListOptions{State: "running"})
	if err != nil {
		log.Fatal(err)
	}
	for _, sb := range list {
		fmt.Println(sb.ID, sb.Name, sb.State)
	}
}

// Prepare a sandbox once, then fork it into parallel runs, each on its own
// branch; fields left nil keep the parent's values.
func ExampleClient_CloneSandbox() {
	ctx := context.Background()
	client, err := zeish.NewClientFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	forks, err := client.CloneSandbox(ctx, "sbx_prepared", zeish.CloneRequest{
		Name:      "attempt",
		Count:     3,
		GitBranch: new("agent/attempt"),
		Browser:   new(false),
	}, zeish.Wait())
	if err != nil {
		log.Fatal(err) // errors.Is(err, errdefs.ErrNodeFull) when the host is full
	}
	fmt.Printf("parent paused for %d ms\n", forks.PauseMS)
	for _, child := range forks.Sandboxes {
		fmt.Println(child.ID, child.Name, child.State, "forked from", child.ParentID)
	}
}

// Follow a sandbox's state changes until the context ends.
func ExampleClient_Events() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := zeish.NewClientFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	stream, err := client.Events(ctx, "sbx_example")
	if err != nil {
		log.Fatal(err)
	}
	defer stream.Close()
	for stream.Next() {
		sb := stream.Event().Sandbox
		fmt.Println(sb.UpdatedAt.Format(time.RFC3339), sb.State)
	}
	if err := stream.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Fatal(err)
	}
}
