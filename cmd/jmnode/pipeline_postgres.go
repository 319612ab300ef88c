package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jmcluster/jmcluster/internal/pgserver"
	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
)

// pgMaxPrepared is the demo server's max_prepared_transactions: the sink prepares one
// transaction per subtask and checkpoint, committed when the checkpoint completes.
const pgMaxPrepared = 64

// pgProc is the PostgreSQL server of demo-pipeline (internal/pgserver: initdb under the demo's
// directory, a free loopback port), with the user and database clicks and the table
// minute_clicks, which has no unique key: a row written twice would be there twice.
type pgProc struct {
	srv      *pgserver.Server
	dir      string // the server's directory, removed by stop
	password string // the user clicks's
}

func startPostgres(ctx context.Context, dir string) (*pgProc, error) {
	// The server runs as the user postgres when this process is root: its directory is a new
	// one under the system's temporary directory, which that user can reach (dir may be under
	// directories only root can enter); it is removed when the demo ends.
	pgDir, err := os.MkdirTemp("", "jmcluster-pipeline-pg-")
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{Dir: pgDir, MaxPreparedTransactions: pgMaxPrepared, Log: logf})
	if err != nil {
		_ = os.RemoveAll(pgDir)
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	p := &pgProc{srv: srv, dir: pgDir, password: randomSecret()}
	if err := srv.CreateUserAndDatabase(ctx, "clicks", p.password, "clicks"); err != nil {
		p.stop()
		return nil, err
	}
	if err := srv.ExecIn(ctx, "clicks", `CREATE TABLE minute_clicks (
		user_id text NOT NULL, window_start bigint NOT NULL, clicks bigint NOT NULL, amount bigint NOT NULL);
		ALTER TABLE minute_clicks OWNER TO clicks`); err != nil {
		p.stop()
		return nil, fmt.Errorf("create table minute_clicks: %w", err)
	}
	return p, nil
}

func (p *pgProc) port() int   { return p.srv.Port() }
func (p *pgProc) url() string { return p.srv.URL("clicks", "clicks") }
func (p *pgProc) stop()       { _ = p.srv.Stop() }

// readTotals reads the table's rows by user and minute.
func (p *pgProc) readTotals(ctx context.Context) (map[pipelinecheck.WindowKey][]pipelinecheck.Total, error) {
	conn, err := p.srv.Connect(ctx, "clicks")
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT user_id, window_start, clicks, amount FROM minute_clicks")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[pipelinecheck.WindowKey][]pipelinecheck.Total{}
	for rows.Next() {
		var k pipelinecheck.WindowKey
		var t pipelinecheck.Total
		if err := rows.Scan(&k.User, &k.Start, &t.Count, &t.Sum); err != nil {
			return nil, err
		}
		got[k] = append(got[k], t)
	}
	return got, rows.Err()
}

// preparedXacts names the prepared transactions left on the server.
func (p *pgProc) preparedXacts(ctx context.Context) ([]string, error) {
	conn, err := p.srv.Connect(ctx, "clicks")
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts ORDER BY gid")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var gid string
		if err := rows.Scan(&gid); err != nil {
			return nil, err
		}
		out = append(out, gid)
	}
	return out, rows.Err()
}
