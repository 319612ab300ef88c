package operator

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// The postgres_sink's two-phase commit (docs/checkpoints.md, docs/connectors.md). In a
// checkpointed job the rows between two barriers are one transaction, prepared at the
// barrier as jm:<job>:<vertex>:<subtask>:<checkpoint> (PrepareCommit) and committed by that
// name once a checkpoint at or after it completed (CommitCheckpoint), on a connection of its
// own: the TaskManager commits from another goroutine. The names are the state: a task
// restored from checkpoint R commits every prepared transaction of its subtask up to R and
// rolls back the later ones (their rows are replayed), wherever the earlier attempt ran.

// errNoPreparedTransactions: the server cannot prepare transactions.
var errNoPreparedTransactions = errors.New("the server's max_prepared_transactions is 0, and a checkpointed job's postgres_sink prepares a transaction at each checkpoint " +
	"(PREPARE TRANSACTION): set max_prepared_transactions in postgresql.conf (at least the sinks' subtasks times the checkpoints in flight, plus one) and restart the server")

// gid is the name of checkpoint id's prepared transaction.
func (s *postgresSink) gid(id uint64) string { return s.gidPrefix + strconv.FormatUint(id, 10) }

// PrepareCommit writes the rows left since the last barrier and prepares the transaction as
// checkpoint id's. A failure leaves the transaction's fate unknown: the sink is broken, its
// next Write fails the task, and the restored task settles the name.
func (s *postgresSink) PrepareCommit(id uint64) error {
	if !s.checkpointed {
		return nil
	}
	if s.broken != nil {
		return s.broken
	}
	if failpoint.Enabled(failpoint.PostgresCommitAtBarrier) {
		// The planted bug: the rows are committed at the barrier, before the checkpoint
		// completed; a restore from an earlier checkpoint writes them again.
		if err := s.w.run(fmt.Sprintf("commit at the barrier of checkpoint %d", id), nil, func() error { return s.w.commit(1) }); err != nil {
			s.broken = err
			return err
		}
		return nil
	}
	gid := s.gid(id)
	prepared := false
	err := s.w.run(fmt.Sprintf("prepare checkpoint %d", id), func() (bool, error) {
		ok, err := s.w.isPrepared(gid) // the PREPARE went through before its answer was lost
		if ok {
			s.w.settled()
			prepared = true
		}
		return ok, err
	}, func() error {
		var err error
		prepared, err = s.w.prepare(gid)
		return err
	})
	if err != nil {
		s.broken = err
		return err
	}
	if prepared {
		s.commitMu.Lock()
		s.prepared = append(s.prepared, id)
		s.commitMu.Unlock()
	}
	return nil
}

// CommitCheckpoint commits every transaction prepared for a checkpoint up to id.
func (s *postgresSink) CommitCheckpoint(id uint64) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.commitPreparedLocked(id); err != nil {
		return err
	}
	s.committed = max(s.committed, id)
	return nil
}

// Committed is the newest checkpoint whose rows are committed (0: none).
func (s *postgresSink) Committed() uint64 {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.committed
}

// finishCommitted commits every transaction this attempt prepared, then rolls back any other
// of its names: every input ended, and this attempt wrote every row since the restored
// checkpoint.
func (s *postgresSink) finishCommitted() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.commitPreparedLocked(^uint64(0)); err != nil {
		return err
	}
	return s.settleOthers(s.restoredID)
}

func (s *postgresSink) commitPreparedLocked(id uint64) error {
	k := 0
	defer func() { s.prepared = s.prepared[k:] }()
	for ; k < len(s.prepared) && s.prepared[k] <= id; k++ {
		if err := s.settle(s.prepared[k], true); err != nil {
			return err
		}
		s.committed = max(s.committed, s.prepared[k])
	}
	return nil
}

// settle commits (or rolls back) checkpoint id's prepared transaction. A name the server does
// not hold was settled already (by a restored attempt, or before an answer was lost).
func (s *postgresSink) settle(id uint64, commit bool) error {
	verb := "COMMIT PREPARED "
	if !commit {
		verb = "ROLLBACK PREPARED "
	}
	return s.onCommitConn(fmt.Sprintf("%sfor checkpoint %d", strings.ToLower(verb), id), func(c *pgx.Conn) error {
		_, err := c.Exec(s.ctx, verb+quoteLiteral(s.gid(id)))
		if isCode(err, "42704") { // undefined_object: no such prepared transaction
			return nil
		}
		return err
	})
}

// onCommitConn runs f on the commit connection (commitMu held), reconnecting as the writer
// does.
func (s *postgresSink) onCommitConn(what string, f func(c *pgx.Conn) error) error {
	return s.retry(what, func(bool) error {
		if s.cconn == nil {
			c, err := pgx.ConnectConfig(s.ctx, s.cfg)
			if err != nil {
				return err
			}
			s.cconn = c
		}
		return f(s.cconn)
	}, func() *pgx.Conn { return s.cconn }, func() {
		if s.cconn != nil {
			_ = s.cconn.Close(s.ctx)
			s.cconn = nil
		}
	})
}

// openCommitted checks that the server can prepare transactions, then settles those an
// earlier attempt of this subtask prepared: up to the restored checkpoint committed (its
// completion may not have reached that attempt), later ones rolled back.
func (s *postgresSink) openCommitted() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	err := s.onCommitConn("check max_prepared_transactions", func(c *pgx.Conn) error {
		var mpt string
		if err := c.QueryRow(s.ctx, "SHOW max_prepared_transactions").Scan(&mpt); err != nil {
			return err
		}
		if mpt == "0" {
			return errNoPreparedTransactions
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.settleOthers(s.restoredID); err != nil {
		return err
	}
	s.committed = s.restoredID
	return nil
}

// settleOthers settles the transactions of this subtask's names that this attempt did not
// prepare (commitMu held): up to upTo committed, later ones rolled back. At Open they are an
// earlier attempt's; at Finish, after this attempt committed its own, a superseded attempt's
// that prepared after this one's Open (its rows are this attempt's too).
func (s *postgresSink) settleOthers(upTo uint64) error {
	var gids []string
	err := s.onCommitConn("list the prepared transactions", func(c *pgx.Conn) error {
		rows, err := c.Query(s.ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)", s.gidPrefix)
		if err != nil {
			return err
		}
		gids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return err
	}
	var ids []uint64
	for _, g := range gids {
		if id, err := strconv.ParseUint(strings.TrimPrefix(g, s.gidPrefix), 10, 64); err == nil && !slices.Contains(s.prepared, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		commit := id <= upTo
		s.info.Logger.Info("postgres_sink: settling a transaction another attempt prepared", "checkpoint", id, "restored", s.restoredID, "commit", commit)
		if err := s.settle(id, commit); err != nil {
			return err
		}
	}
	return nil
}
