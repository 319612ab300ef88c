// Package pgserver starts a PostgreSQL server of the machine's installation as a child
// process: a cluster of its own in a directory, on a loopback port, with a superuser whose
// password it generates. The tests of the postgres_sink and `jmnode demo-pipeline` run their
// database with it.
package pgserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jmcluster/jmcluster/internal/freeport"
)

// The server's defaults and bounds.
const (
	// AdminUser is the superuser the cluster is created with.
	AdminUser = "jmadmin"
	// DefaultMaxPreparedTransactions is max_prepared_transactions when Options leaves it 0.
	DefaultMaxPreparedTransactions = 64
	// StartTimeout bounds how long Start waits for the server to accept connections.
	StartTimeout = 2 * time.Minute
	// StopTimeout bounds how long Stop waits for the fast shutdown before it kills.
	StopTimeout = 30 * time.Second
	// passwordFile holds the admin password in Dir (0600), so that a later Start on the same
	// Dir connects.
	passwordFile = "jmadmin.password"
	// dataDir is the cluster's directory inside Dir.
	dataDir = "data"
)

// Options configure Start.
type Options struct {
	// Dir holds the cluster (Dir/data), the unix socket and the admin password; it must
	// exist. A Dir without a cluster gets one (initdb).
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// MaxPreparedTransactions is the server's max_prepared_transactions; 0 means
	// DefaultMaxPreparedTransactions, a negative value 0 (no prepared transactions).
	MaxPreparedTransactions int
	// NoFsync runs the server with fsync off: faster, and a machine crash loses the data.
	// For tests only.
	NoFsync bool
	// Log gets the server's output; nil discards it.
	Log io.Writer

	// Host is the address the server listens on and the URLs name; "" means 127.0.0.1.
	Host string
	// HBA are lines put first in the cluster's pg_hba.conf when it is made (initdb's allow
	// host connections from loopback, with a password), e.g. "host clicks clicks
	// 10.77.0.0/24 trust": the first line that matches a connection decides.
	HBA []string
	// Dial connects this process to the server (Connect, the wait at Start); nil dials
	// directly. A server started in another network namespace is reached through one.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Spawn starts the postgres process; nil is cmd.Start. A caller that runs the server in
	// another network namespace starts it from a thread inside that namespace.
	Spawn func(cmd *exec.Cmd) error
}

// Server is a running PostgreSQL server.
type Server struct {
	o        Options
	bindir   string
	password string
	cred     *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	err  error         // cmd's exit
}

// Find returns the directory of the PostgreSQL programs (initdb, postgres): the newest
// /usr/lib/postgresql/VERSION/bin, else the one of initdb on PATH.
func Find() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/initdb and no initdb on PATH " +
		"(install it: apt-get install postgresql, or make postgres)")
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start starts the server of o.Dir (initdb first when it holds no cluster) and waits until
// it accepts connections. Run as root, the server runs as the user postgres (else nobody),
// and Dir becomes that user's.
func Start(ctx context.Context, o Options) (*Server, error) {
	bindir, err := Find()
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		return nil, errors.New("pgserver: Options.Dir is empty")
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, err
	}
	if o.MaxPreparedTransactions == 0 {
		o.MaxPreparedTransactions = DefaultMaxPreparedTransactions
	} else if o.MaxPreparedTransactions < 0 {
		o.MaxPreparedTransactions = 0
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	s := &Server{o: o, bindir: bindir}
	if os.Geteuid() == 0 {
		if s.cred, err = serverUser(); err != nil {
			return nil, err
		}
		if err := enterable(filepath.Dir(o.Dir), s.cred); err != nil {
			return nil, err
		}
		if err := chownTree(o.Dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgserver: give %s to the server's user: %w", o.Dir, err)
		}
	}
	if err := s.initCluster(ctx); err != nil {
		return nil, err
	}
	if s.o.Port == 0 {
		if s.o.Port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// serverUser is the user a root process runs the server as: postgres, else nobody.
func serverUser() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgserver: running as root, and neither the user postgres nor nobody exists to run the server as (PostgreSQL refuses root)")
}

// enterable checks that the server's user can enter dir and each of its parents: a
// directory made by os.MkdirTemp or t.TempDir is 0700 root, and the server would fail at
// its start with a less direct error.
func enterable(dir string, cred *syscall.Credential) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		perm := st.Mode().Perm()
		sys, _ := st.Sys().(*syscall.Stat_t)
		ok := perm&0o001 != 0 ||
			sys != nil && sys.Uid == cred.Uid && perm&0o100 != 0 ||
			sys != nil && sys.Gid == cred.Gid && perm&0o010 != 0
		if !ok {
			return fmt.Errorf("pgserver: the server runs as uid %d (PostgreSQL refuses root), which cannot enter %s (mode %o): choose a Dir whose parents others may enter, or chmod o+x %s", cred.Uid, d, perm, d)
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}

func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// initCluster runs initdb when Dir holds no cluster, with the admin's new password; else it
// reads the password kept in Dir.
func (s *Server) initCluster(ctx context.Context) error {
	pwPath := filepath.Join(s.o.Dir, passwordFile)
	if _, err := os.Stat(filepath.Join(s.o.Dir, dataDir, "PG_VERSION")); err == nil {
		b, err := os.ReadFile(pwPath)
		if err != nil {
			return fmt.Errorf("pgserver: %s holds a cluster but not its admin password: %w", s.o.Dir, err)
		}
		s.password = strings.TrimSpace(string(b))
		return nil
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	s.password = hex.EncodeToString(raw[:])
	if err := os.WriteFile(pwPath, []byte(s.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(pwPath, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.bindir, "initdb"), "-D", filepath.Join(s.o.Dir, dataDir),
		"-U", AdminUser, "--pwfile", pwPath, "--auth-host=scram-sha-256", "--auth-local=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = s.procAttr()
	cmd.Dir = s.o.Dir
	out, err := cmd.CombinedOutput()
	_, _ = s.o.Log.Write(out)
	if err != nil {
		return fmt.Errorf("pgserver: initdb in %s: %w: %s", s.o.Dir, err, lastLines(string(out), 5))
	}
	if len(s.o.HBA) > 0 {
		// Before initdb's lines: the first line that matches a connection decides.
		hba := filepath.Join(s.o.Dir, dataDir, "pg_hba.conf")
		b, err := os.ReadFile(hba)
		if err == nil {
			err = os.WriteFile(hba, append([]byte(strings.Join(s.o.HBA, "\n")+"\n"), b...), 0o600)
		}
		if err == nil && s.cred != nil {
			err = os.Chown(hba, int(s.cred.Uid), int(s.cred.Gid))
		}
		if err != nil {
			return fmt.Errorf("pgserver: pg_hba.conf: %w", err)
		}
	}
	return nil
}

// procAttr: the child dies with this process, and runs as the server's user under root.
func (s *Server) procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.cred}
}

// freePort is a loopback port below the kernel's ephemeral range (internal/freeport).
func freePort() (int, error) {
	ports, err := freeport.Ports("127.0.0.1", 1)
	if err != nil {
		return 0, fmt.Errorf("pgserver: a free port: %w", err)
	}
	return ports[0], nil
}

// start runs the postgres process and waits until it accepts the admin's connections.
func (s *Server) start(ctx context.Context) error {
	args := []string{"-D", filepath.Join(s.o.Dir, dataDir), "-p", strconv.Itoa(s.o.Port),
		"-c", "listen_addresses=" + s.o.Host, "-c", "unix_socket_directories=" + s.o.Dir,
		"-c", "max_prepared_transactions=" + strconv.Itoa(s.o.MaxPreparedTransactions),
		"-c", "max_connections=100", "-c", "shared_buffers=16MB"}
	if s.o.NoFsync {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(s.bindir, "postgres"), args...)
	cmd.SysProcAttr = s.procAttr()
	cmd.Dir = s.o.Dir
	tail := &tailWriter{w: s.o.Log}
	cmd.Stdout, cmd.Stderr = tail, tail
	spawn := s.o.Spawn
	if spawn == nil {
		spawn = (*exec.Cmd).Start
	}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("pgserver: start postgres: %w", err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.done, s.err = cmd, done, nil
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(done)
	}()
	deadline := time.Now().Add(StartTimeout)
	var last error
	for {
		select {
		case <-done:
			return fmt.Errorf("pgserver: postgres on port %d exited at its start (%v): %s", s.o.Port, s.exitErr(), tail.last(10))
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := s.connectURL(cctx, s.AdminURL())
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		last = err
		if ctx.Err() != nil || time.Now().After(deadline) {
			_ = s.Stop()
			return fmt.Errorf("pgserver: postgres on port %d accepts no connection after %v: %v; its log: %s", s.o.Port, StartTimeout, last, tail.last(10))
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-done:
		case <-ctx.Done():
		}
	}
}

func (s *Server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// connectURL connects to url through Options.Dial when it is set.
func (s *Server) connectURL(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if s.o.Dial != nil {
		cfg.DialFunc = s.o.Dial
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// Port is the server's TCP port on Options.Host.
func (s *Server) Port() int { return s.o.Port }

// Dir is the server's directory (Options.Dir).
func (s *Server) Dir() string { return s.o.Dir }

// AdminPassword is the superuser's password.
func (s *Server) AdminPassword() string { return s.password }

// AdminURL is the URL of database postgres as the superuser, with its password.
func (s *Server) AdminURL() string { return s.adminURL("postgres") }

func (s *Server) adminURL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(AdminUser, s.password),
		Host: net.JoinHostPort(s.o.Host, strconv.Itoa(s.o.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// URL is the URL of database db as user, without a password.
func (s *Server) URL(user, db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(user),
		Host: net.JoinHostPort(s.o.Host, strconv.Itoa(s.o.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Connect connects to database db as the superuser.
func (s *Server) Connect(ctx context.Context, db string) (*pgx.Conn, error) {
	return s.connectURL(ctx, s.adminURL(db))
}

// Exec runs sql as the superuser on database postgres.
func (s *Server) Exec(ctx context.Context, sql string, args ...any) error {
	return s.ExecIn(ctx, "postgres", sql, args...)
}

// ExecIn runs sql as the superuser on database db.
func (s *Server) ExecIn(ctx context.Context, db, sql string, args ...any) error {
	conn, err := s.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// CreateUserAndDatabase creates user with password (a login role) and database db owned by
// it.
func (s *Server) CreateUserAndDatabase(ctx context.Context, user, password, db string) error {
	name := pgx.Identifier{user}.Sanitize()
	if err := s.Exec(ctx, "CREATE ROLE "+name+" LOGIN PASSWORD "+quoteLiteral(password)); err != nil {
		return fmt.Errorf("pgserver: create user %s: %w", user, err)
	}
	if err := s.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER "+name); err != nil {
		return fmt.Errorf("pgserver: create database %s: %w", db, err)
	}
	return nil
}

// quoteLiteral is s as an SQL string literal (standard_conforming_strings on).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Stop shuts the server down fast (SIGINT: open transactions are rolled back, prepared ones
// kept) and waits for it to exit; after StopTimeout it kills it.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
		return nil
	case <-time.After(StopTimeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("pgserver: postgres on port %d did not stop within %v and was killed", s.o.Port, StopTimeout)
	}
}

// Restart stops the server and starts it again on the same port and directory.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start(ctx)
}

// tailWriter passes the server's output on and keeps its last bytes for errors.
type tailWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// tailBytes is how much of the server's output a tailWriter keeps.
const tailBytes = 8 << 10

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = t.buf[len(t.buf)-tailBytes:]
	}
	_, _ = t.w.Write(p)
	return len(p), nil
}

func (t *tailWriter) last(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lastLines(string(t.buf), n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
