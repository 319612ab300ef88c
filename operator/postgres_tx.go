package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The postgres_sink's connection and its transaction. The rows of the open transaction are
// kept until it is prepared or committed: when the connection is lost (the server restarts,
// the network fails), the server rolls the transaction back and the sink reconnects with
// backoff and writes it again from them, so nothing is lost or written twice.

const (
	// postgresReconnectFor bounds how long the sink tries to reconnect to a server it lost:
	// after it the task fails, and the job's restart strategy applies.
	postgresReconnectFor = 2 * time.Minute
	// postgresBackoffMin and postgresBackoffMax bound the wait between two reconnections;
	// it doubles from the first to the second.
	postgresBackoffMin = 100 * time.Millisecond
	postgresBackoffMax = 5 * time.Second
	// postgresConnectTimeout bounds one attempt to connect (a host that does not answer).
	postgresConnectTimeout = 10 * time.Second
	// postgresCloseTimeout bounds the goodbye to a server when a connection is dropped.
	postgresCloseTimeout = time.Second
)

// pgWriter is the task goroutine's connection and its open transaction.
type pgWriter struct {
	s    *postgresSink
	conn *pgx.Conn
	inTx bool
	rows []pgRow // the rows since the transaction began (checkpointed: since the last barrier)
	sent int     // rows[:sent] are written in the open transaction
}

// check connects and has the server plan the statement of one row (EXPLAIN, which executes
// nothing): a missing table or column, or key columns without a unique constraint, fail the
// task at Open.
func (w *pgWriter) check() error {
	return w.run("check table "+w.s.spec.GetTable(), nil, func() error {
		rs, err := w.conn.Query(w.s.ctx, "EXPLAIN "+w.s.stmt(1), make([]any, len(w.s.cols))...)
		if err != nil {
			return err
		}
		rs.Close()
		return rs.Err()
	})
}

// run runs f, named what, on the connection; when the connection is lost, it reconnects
// with backoff (retry), and after a reconnection asks done first whether f's work is already
// done (a PREPARE whose answer was lost).
func (w *pgWriter) run(what string, done func() (bool, error), f func() error) error {
	return w.s.retry(what, func(again bool) error {
		if w.conn == nil {
			c, err := pgx.ConnectConfig(w.s.ctx, w.s.cfg)
			if err != nil {
				return err
			}
			w.conn = c
		}
		if again && done != nil {
			if ok, err := done(); err != nil || ok {
				return err
			}
		}
		return f()
	}, func() *pgx.Conn { return w.conn }, w.drop)
}

// drop closes the connection; its transaction is gone with it.
func (w *pgWriter) drop() {
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), postgresCloseTimeout)
		_ = w.conn.Close(ctx)
		cancel()
	}
	w.conn, w.inTx = nil, false
}

// tx begins the transaction when none is open, and writes again the rows a lost one held.
func (w *pgWriter) tx() error {
	if w.inTx {
		return nil
	}
	if _, err := w.conn.Exec(w.s.ctx, "BEGIN"); err != nil {
		return err
	}
	w.inTx = true
	for i := 0; i < w.sent; i += w.s.chunk {
		if err := w.insert(w.rows[i:min(w.sent, i+w.s.chunk)]); err != nil {
			return err
		}
	}
	return nil
}

// sendRows writes the rows not sent yet, a statement per chunk, while at least least rows
// are left to send.
func (w *pgWriter) sendRows(least int) error {
	for n := len(w.rows) - w.sent; n > 0 && n >= least; n = len(w.rows) - w.sent {
		if err := w.tx(); err != nil {
			return err
		}
		k := min(n, w.s.chunk)
		if err := w.insert(w.rows[w.sent : w.sent+k]); err != nil {
			return err
		}
		w.sent += k
	}
	return nil
}

// commit writes the rows while at least least are left, then commits the transaction.
func (w *pgWriter) commit(least int) error {
	if err := w.sendRows(least); err != nil {
		return err
	}
	if !w.inTx {
		return nil
	}
	if _, err := w.conn.Exec(w.s.ctx, "COMMIT"); err != nil {
		return err
	}
	w.settled()
	return nil
}

// prepare writes every row left and prepares the transaction as gid; false when there was
// none to prepare (no row since the last barrier).
func (w *pgWriter) prepare(gid string) (bool, error) {
	if err := w.sendRows(1); err != nil {
		return false, err
	}
	if !w.inTx {
		return false, nil
	}
	if _, err := w.conn.Exec(w.s.ctx, "PREPARE TRANSACTION "+quoteLiteral(gid)); err != nil {
		return false, err
	}
	if postgresLosePrepareAnswer != nil && postgresLosePrepareAnswer() {
		_ = w.conn.PgConn().Close(w.s.ctx)
		return false, errors.New("the answer to PREPARE TRANSACTION was lost with the connection")
	}
	w.settled()
	return true, nil
}

// postgresLosePrepareAnswer, set by a test, closes the connection right after a PREPARE went
// through, as a network failure before its answer would: the sink must find the name on the
// server rather than write the transaction again. Nil otherwise.
var postgresLosePrepareAnswer func() bool

// settled forgets the rows of the transaction just committed or prepared.
func (w *pgWriter) settled() {
	w.inTx = false
	w.rows = append(w.rows[:0:0], w.rows[w.sent:]...)
	w.sent = 0
}

// isPrepared reports whether the server holds the prepared transaction gid.
func (w *pgWriter) isPrepared(gid string) (bool, error) {
	var ok bool
	err := w.conn.QueryRow(w.s.ctx, "SELECT EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE gid = $1 AND database = current_database())", gid).Scan(&ok)
	return ok, err
}

// insert writes rows (those not refused before) with one statement under a savepoint. When
// the table refuses the statement (a constraint, a value its column's type cannot take), it
// rolls back to the savepoint and writes the rows one by one, each under a savepoint of its
// own: a row refused goes to the dead-letter output with the server's error, the others stay.
func (w *pgWriter) insert(rows []pgRow) error {
	var args []any
	n := 0
	for i := range rows {
		if !rows[i].dead {
			args = append(args, rows[i].vals...)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	err := w.underSavepoint("jm_batch", w.s.stmt(n), args)
	if err == nil || !refusedRow(err) {
		return err
	}
	for i := range rows {
		r := &rows[i]
		if r.dead {
			continue
		}
		err := w.underSavepoint("jm_row", w.s.stmt(1), r.vals)
		if err == nil {
			continue
		}
		if !refusedRow(err) {
			return err
		}
		r.dead = true
		if err := sendDeadLetter(w.s.info, r.rec, "refused by table "+w.s.spec.GetTable()+": "+pgErrorText(err)); err != nil {
			return err
		}
	}
	return nil
}

// underSavepoint runs the statement q in one round trip between SAVEPOINT name and its
// RELEASE; when it fails, the transaction is rolled back to the savepoint and the
// statement's error returned.
func (w *pgWriter) underSavepoint(name, q string, args []any) error {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + name)
	b.Queue(q, args...)
	b.Queue("RELEASE SAVEPOINT " + name)
	br := w.conn.SendBatch(w.s.ctx, b)
	var first error
	for range 3 {
		if _, err := br.Exec(); err != nil && first == nil {
			first = err
		}
	}
	if err := br.Close(); err != nil && first == nil {
		first = err
	}
	if first == nil || !refusedRow(first) {
		return first
	}
	if _, err := w.conn.Exec(w.s.ctx, "ROLLBACK TO SAVEPOINT "+name); err != nil {
		return err
	}
	return first
}

// refusedRow: the server refused a row's values (SQLSTATE class 22, data exceptions; 23,
// constraint violations; 21000, an upsert's batch naming one key twice), not the statement.
func refusedRow(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23") || pe.Code == "21000"
}

// pgErrorText is the server's error as a dead letter's reason: its message, detail and code.
func pgErrorText(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	t := pe.Message
	if pe.Detail != "" {
		t += ": " + pe.Detail
	}
	return t + " (SQLSTATE " + pe.Code + ")"
}

// isCode reports whether err is the server's error code.
func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// connLost reports whether err lost the connection (the server going away, the network)
// rather than being the server's answer to a statement, or the task ending.
func (s *postgresSink) connLost(err error, c *pgx.Conn) bool {
	if s.ctx.Err() != nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 57P01-57P03: the server shutting down or starting up;
		// 25P03: the server ended the session, idle in its transaction too long.
		switch pe.Code {
		case "57P01", "57P02", "57P03", "25P03":
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	return c == nil || c.IsClosed()
}

// retry runs op until it succeeds, fails otherwise than by a lost connection, or the server
// stays unreachable for postgresReconnectFor; after a loss it drops the connection and waits
// (backoff, bounded by the task's context) before the next attempt, logging each. op's again
// is true from the second attempt on.
func (s *postgresSink) retry(what string, op func(again bool) error, conn func() *pgx.Conn, drop func()) error {
	var since time.Time
	wait := postgresBackoffMin
	for attempt := 1; ; attempt++ {
		err := op(attempt > 1)
		if err == nil {
			return nil
		}
		if !s.connLost(err, conn()) {
			return fmt.Errorf("postgres_sink: %s: %w", what, s.redact(err))
		}
		drop()
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) >= postgresReconnectFor {
			return fmt.Errorf("postgres_sink: %s: the server stayed unreachable for %v (postgresReconnectFor): %w", what, postgresReconnectFor, s.redact(err))
		}
		s.info.Logger.Warn("postgres_sink: connection lost, reconnecting", "while", what, "attempt", attempt, "wait", wait, "error", s.redact(err).Error())
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			return fmt.Errorf("postgres_sink: %s: the task ended while reconnecting: %w", what, s.redact(err))
		}
		wait = min(2*wait, postgresBackoffMax)
	}
}

// quoteLiteral is s as an SQL string literal (standard_conforming_strings on).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
