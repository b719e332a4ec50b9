package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/zeish/zeish/internal/testskip"
)

// Postgres is a PostgreSQL server a test binary started for itself: its own
// cluster in a temp dir, on a loopback port, run as an unprivileged user
// (initdb refuses root). Stop removes everything.
type Postgres struct {
	dir  string
	bin  string
	port int
	cred *syscall.Credential
	n    atomic.Int64
}

// postgresBin finds Debian's server binaries (/usr/lib/postgresql/<v>/bin),
// the newest version first.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(dirs) == 0 {
		return "", fmt.Errorf("PostgreSQL is not installed (apt-get install postgresql)")
	}
	sort.Slice(dirs, func(i, j int) bool { return dirs[i] > dirs[j] })
	return filepath.Dir(dirs[0]), nil
}

// RequirePostgres skips the test where PostgreSQL is missing, except under
// CI, where it fails.
func RequirePostgres(t testing.TB) {
	t.Helper()
	if _, err := postgresBin(); err != nil {
		testskip.Skip(t, "%v", err)
	}
}

// StartPostgres initialises and starts a cluster. Call Stop when done
// (TestMain, after m.Run).
func StartPostgres() (*Postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "zeish-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("run PostgreSQL unprivileged: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := p.run("initdb", "-D", p.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		p.Stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.Stop()
		return nil, err
	}
	p.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off -c full_page_writes=off", p.port, dir)
	if err := p.run("pg_ctl", "-D", p.data(), "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		p.Stop()
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return p, nil
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

func (p *Postgres) run(tool string, args ...string) error {
	cmd := exec.Command(filepath.Join(p.bin, tool), args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", tool, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// URL is the address of database name on this server.
func (p *Postgres) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, name)
}

// NewDatabase creates an empty database for one test and drops it after.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("zeish_test_%d_%d", os.Getpid(), p.n.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, p.URL("postgres")); err == nil {
			conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	return p.URL(name)
}

// Stop shuts the server down and removes its files.
func (p *Postgres) Stop() {
	if p == nil {
		return
	}
	if p.port != 0 {
		p.run("pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "stop")
	}
	os.RemoveAll(p.dir)
}
