package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zeish/zeish/internal/testskip"
)

// VersityGWVersion is the S3 server scripts/deps.sh installs, as
// /usr/local/bin/versitygw-<version>: tests never build or download it.
const VersityGWVersion = "v1.8.0"

// versitygwBin finds the installed server.
func versitygwBin() (string, error) {
	name := "versitygw-" + VersityGWVersion
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/local/bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not installed (scripts/deps.sh builds it)", name)
	}
	return p, nil
}

// S3 is a real S3 server (versitygw over a temp folder) a test started on
// loopback for itself. Its root folder holds the objects as files, so a
// test can damage one behind the server's back.
type S3 struct {
	Endpoint  string // http://127.0.0.1:port
	AccessKey string
	SecretKey string
	Root      string // <Root>/<bucket>/<key> is an object's file
	addr      string // host:port
	bin       string
	cmd       *exec.Cmd
	exited    chan struct{}
	log       string
}

// StartS3 starts a server for t, stopped at cleanup. It skips (fails under
// CI) where versitygw is not installed.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	if _, err := versitygwBin(); err != nil {
		testskip.Skip(t, "%v", err)
	}
	s, err := OpenS3(t.TempDir())
	if s != nil {
		t.Cleanup(s.stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// OpenS3 starts a server over a folder in dir, outside a test (the
// bench); the caller Closes it, also after an error (then s may be nil).
func OpenS3(dir string) (*S3, error) {
	bin, err := versitygwBin()
	if err != nil {
		return nil, err
	}
	s := &S3{AccessKey: "zeishtest", SecretKey: "zeish-test-secret-" + fmt.Sprint(os.Getpid()),
		Root: filepath.Join(dir, "root"), log: filepath.Join(dir, "log"), bin: bin}
	if err := os.MkdirAll(s.Root, 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.addr = ln.Addr().String()
	ln.Close()
	s.Endpoint = "http://" + s.addr
	return s, s.launch()
}

// Close stops the server.
func (s *S3) Close() { s.stop() }

// launch starts the server on s.addr and waits until it answers.
func (s *S3) launch() error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "--port", s.addr, "--access", s.AccessKey, "--secret", s.SecretKey, "posix", s.Root)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("versitygw exited at start: %s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw not answering on %s after 30 s: %s", s.addr, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Down kills the server, as a store that went away: connections to it are
// refused until Up. Its objects stay.
func (s *S3) Down() { s.stop() }

// Up starts the server again after Down, on the same address and objects.
func (s *S3) Up(t testing.TB) {
	t.Helper()
	if err := s.launch(); err != nil {
		t.Fatal(err)
	}
}

// Log is what the server printed.
func (s *S3) Log() string {
	b, _ := os.ReadFile(s.log)
	return strings.TrimSpace(string(b))
}

func (s *S3) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // a test may have paused it
	s.cmd.Process.Kill()
	<-s.exited
}

// Pause stops the server's process (SIGSTOP): requests hang until Resume.
func (s *S3) Pause() { syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP) }

// Resume lets a paused server go on.
func (s *S3) Resume() { syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT) }

// Client is a plain S3 client of the server, for what tests do around the
// code under test (making buckets).
func (s *S3) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := s.client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *S3) client() (*minio.Client, error) {
	return minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: "us-east-1"})
}

// NewBucket makes a bucket for one test.
func (s *S3) NewBucket(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := s.MakeBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// MakeBucket makes a bucket of a new name and returns the name.
func (s *S3) MakeBucket(ctx context.Context) (string, error) {
	c, err := s.client()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("zeish-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return "", fmt.Errorf("make bucket: %w\n%s", err, s.Log())
	}
	return name, nil
}

// CredentialsFile writes an AWS shared-credentials file with the server's
// keys (or, with wrong, a secret it refuses) and returns its path.
func (s *S3) CredentialsFile(t testing.TB, wrong bool) string {
	t.Helper()
	secret := s.SecretKey
	if wrong {
		secret += "-wrong"
	}
	p := filepath.Join(t.TempDir(), "credentials")
	body := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", s.AccessKey, secret)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
