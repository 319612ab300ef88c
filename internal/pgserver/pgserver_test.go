package pgserver_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/testkit/pgtest"
)

// TestServerStartsRestartsAndChecksPasswords: a server of its own accepts its admin and a
// user created on it, refuses a wrong password, and keeps its data across a restart on the
// same port.
func TestServerStartsRestartsAndChecksPasswords(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Start(t)
	if err := s.CreateUserAndDatabase(ctx, "clicks", "pw'1", "clicks"); err != nil {
		t.Fatal(err)
	}
	connect := func(password string) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(s.URL("clicks", "clicks"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Password = password
		return pgx.ConnectConfig(ctx, cfg)
	}
	if _, err := connect("wrong"); err == nil || !isCode(err, "28P01") {
		t.Fatalf("a wrong password: %v, want SQLSTATE 28P01", err)
	}
	conn, err := connect("pw'1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (n int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	port := s.Port()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Fatalf("restarted on port %d, was %d", s.Port(), port)
	}
	conn, err = connect("pw'1")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the restart: %d rows, %v", n, err)
	}
	var mpt string
	if err := conn.QueryRow(ctx, "SHOW max_prepared_transactions").Scan(&mpt); err != nil || mpt != "64" {
		t.Fatalf("max_prepared_transactions %q, %v", mpt, err)
	}
	if strings.Contains(s.URL("clicks", "clicks"), "pw") {
		t.Fatalf("URL holds a password: %s", s.URL("clicks", "clicks"))
	}
}

// TestServerStartsAgainOnItsDirectory: a stopped server's directory starts again with its
// cluster, data and admin password; under root, a directory the server's user cannot reach
// is refused with the reason.
func TestServerStartsAgainOnItsDirectory(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Start(t)
	if err := s.Exec(ctx, "CREATE TABLE kept (n int)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	again, err := pgserver.Start(ctx, pgserver.Options{Dir: s.Dir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	if err := again.Exec(ctx, "INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatalf("the second start's cluster: %v", err)
	}

	closed := filepath.Join(t.TempDir(), "pg") // t.TempDir's parent is 0700
	if err := os.Mkdir(closed, 0o755); err != nil {
		t.Fatal(err)
	}
	s2, err := pgserver.Start(ctx, pgserver.Options{Dir: closed, NoFsync: true})
	if os.Geteuid() != 0 {
		if err != nil {
			t.Fatal(err)
		}
		_ = s2.Stop()
		return
	}
	if err == nil {
		_ = s2.Stop()
		t.Fatal("a directory the server's user cannot enter was accepted")
	}
	if !strings.Contains(err.Error(), "cannot enter") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// TestServerOptionsForAnotherNamespace: the options the fault suite's pipeline uses to run a
// server in another network namespace are all taken: Spawn starts the postgres process, Dial
// makes this process's connections, HBA's lines are the cluster's (a user trusted by its line
// connects with any password, where a user without one is refused), Host is the address the
// URLs name.
func TestServerOptionsForAnotherNamespace(t *testing.T) {
	ctx := context.Background()
	var spawned, dialed atomic.Int32
	s := pgtest.StartWith(t, pgserver.Options{Host: "127.0.0.1",
		HBA: []string{"host trusting trusty 127.0.0.1/32 trust"},
		Spawn: func(cmd *exec.Cmd) error {
			spawned.Add(1)
			return cmd.Start()
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	if spawned.Load() != 1 || dialed.Load() == 0 {
		t.Fatalf("Spawn called %d times (want 1), Dial %d (want some)", spawned.Load(), dialed.Load())
	}
	for _, u := range []string{"trusty", "other"} {
		if err := s.CreateUserAndDatabase(ctx, u, "right-"+u, map[string]string{"trusty": "trusting", "other": "others"}[u]); err != nil {
			t.Fatal(err)
		}
	}
	wrong := func(user, db string) error {
		url := strings.Replace(s.URL(user, db), user+"@", user+":wrong@", 1)
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err
	}
	if !strings.Contains(s.URL("trusty", "trusting"), "@127.0.0.1:") {
		t.Errorf("URL %s does not name the Host", s.URL("trusty", "trusting"))
	}
	if err := wrong("trusty", "trusting"); err != nil {
		t.Errorf("the user the HBA line trusts was refused: %v", err)
	}
	if err := wrong("other", "others"); err == nil {
		t.Error("a user without a trust line connected with a wrong password")
	}
}
