package pgserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
