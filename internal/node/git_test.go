package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/gitws"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

func TestGitAuth(t *testing.T) {
	rec := func(repo, secretName string, secrets map[string]string) *store.SandboxRecord {
		return &store.SandboxRecord{Sandbox: sandbox.Sandbox{GitRepo: repo, GitTokenSecret: secretName}, SecretEnv: secrets}
	}
	cases := []struct {
		name string
		r    *store.SandboxRecord
		want *guest.GitAuth
	}{
		{"no repo", rec("", "", map[string]string{"GIT_TOKEN": "t"}), nil},
		{"no token", rec("https://git.example/r", "", nil), nil},
		{"https with GIT_TOKEN", rec("https://git.example:8443/r", "", map[string]string{"GIT_TOKEN": "t"}),
			&guest.GitAuth{Protocol: "https", Host: "git.example:8443", Username: sandbox.GitDefaultUsername, Password: "t", User: sandbox.GitUser}},
		{"http with a named secret and a user name", rec("http://198.18.7.7:8080/r", "GL", map[string]string{"GL": "t2", "GIT_USERNAME": "bob"}),
			&guest.GitAuth{Protocol: "http", Host: "198.18.7.7:8080", Username: "bob", Password: "t2", User: sandbox.GitUser}},
		{"git:// has no authentication", rec("git://git.example/r", "", map[string]string{"GIT_TOKEN": "t"}), nil},
	}
	for _, c := range cases {
		if got := gitAuth(c.r); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestBootErrorCodeOfGit(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("ready: %w", &gitws.Error{Step: "clone", Msg: "fatal: not found"}), sandbox.ErrGitCloneFailed},
		{fmt.Errorf("git clone: %w", gitws.NoGit), sandbox.ErrGitCloneFailed},
		{fmt.Errorf("agent: %w", errdefs.ErrTimeout), sandbox.ErrBootTimeout},
		{errors.New("qemu said no"), sandbox.ErrBootFailed},
	}
	for _, c := range cases {
		if got := bootErrorCode(context.Background(), c.err); got != c.want {
			t.Errorf("bootErrorCode(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
