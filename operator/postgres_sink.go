package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/tidwall/gjson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("postgres_sink", runtime{
		sink: func(op *pb.Operator, info Info, _ string) Sink { return newPostgresSink(op.GetPostgresSink(), info) },
	})
}

// The postgres_sink's defaults and bounds (docs/connectors.md, "PostgreSQL sink").
const (
	// postgresDefaultBatchRows is batch_rows when the spec leaves it 0.
	postgresDefaultBatchRows = 500
	// postgresMaxParams is the protocol's bound on the parameters of one statement: a batch
	// has at most postgresMaxParams / len(columns) rows.
	postgresMaxParams = 65535
	// postgresMaxGIDBytes is the server's bound on a prepared transaction's name (GIDSIZE
	// 200, with its NUL byte).
	postgresMaxGIDBytes = 199
)

// postgresSink writes each record as a row of a table (docs/connectors.md). This file: the
// rows and their statements; postgres_tx.go: the connection, its transaction and the
// reconnection; postgres_commit.go: the two-phase commit by prepared transactions.
type postgresSink struct {
	spec         *pb.PostgresSink
	info         Info
	cols         []pgColumn
	needJSON     bool   // a column reads the record's value
	insert       string // "INSERT INTO t (a, b) VALUES "
	conflict     string // " ON CONFLICT (...) DO ...", or ""
	chunk        int    // rows per statement
	stmts        map[int]string
	checkpointed bool

	ctx      context.Context // the task's, from Open
	cfg      *pgx.ConnConfig // with the password: never logged nor put in an error
	password string

	// The task goroutine's connection and its open transaction (postgres_tx.go).
	w pgWriter
	// broken is the error a failed PrepareCommit left: the open transaction's fate is
	// unknown, so the next Write or Finish fails the task and a restore settles it.
	broken error

	// The two-phase commit (postgres_commit.go), from the TaskManager's commit goroutine too.
	commitMu   sync.Mutex
	cconn      *pgx.Conn
	prepared   []uint64 // the checkpoints whose transactions are prepared, not committed
	committed  uint64
	restoredID uint64
	gidPrefix  string // "jm:<job>:<vertex>:<subtask>:"
}

// pgColumn is one column and where its value comes from.
type pgColumn struct {
	name string
	key  bool // the record's key
	path jsonPath
}

// pgRow is a record's row, kept until its transaction is prepared or committed so that a
// lost connection's transaction can be written again.
type pgRow struct {
	rec  Record // its own copy of the key and value, which vals may point into
	vals []any  // a string per column, nil for NULL
	dead bool   // refused by the table and sent to the dead-letter output
}

func newPostgresSink(spec *pb.PostgresSink, info Info) *postgresSink {
	s := &postgresSink{spec: spec, info: info, checkpointed: info.Checkpointed, restoredID: info.RestoredCheckpoint,
		stmts:     map[int]string{},
		gidPrefix: fmt.Sprintf("jm:%s:%s:%d:", info.Job, info.Vertex, info.Subtask)}
	names := make([]string, len(spec.GetColumns()))
	for i, c := range spec.GetColumns() {
		col := pgColumn{name: c.GetName(), key: c.GetPath() == ""}
		if !col.key {
			col.path = newJSONPath(c.GetPath())
			s.needJSON = true
		}
		s.cols = append(s.cols, col)
		names[i] = c.GetName()
	}
	s.insert = "INSERT INTO " + spec.GetTable() + " (" + strings.Join(names, ", ") + ") VALUES "
	if spec.GetMode() == pb.PostgresMode_POSTGRES_MODE_UPSERT {
		keys := spec.GetKeyColumns()
		var set []string
		for _, n := range names {
			if !containsFold(keys, n) {
				set = append(set, n+" = EXCLUDED."+n)
			}
		}
		s.conflict = " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO NOTHING"
		if len(set) > 0 {
			s.conflict = " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET " + strings.Join(set, ", ")
		}
	}
	batch := int(spec.GetBatchRows())
	if batch <= 0 {
		batch = postgresDefaultBatchRows
	}
	s.chunk = max(1, min(batch, postgresMaxParams/max(1, len(s.cols))))
	s.w.s = s
	return s
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// stmt is the statement that writes n rows.
func (s *postgresSink) stmt(n int) string {
	if q, ok := s.stmts[n]; ok {
		return q
	}
	var b strings.Builder
	b.WriteString(s.insert)
	p := 1
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range s.cols {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(p))
			p++
		}
		b.WriteByte(')')
	}
	b.WriteString(s.conflict)
	q := b.String()
	s.stmts[n] = q
	return q
}

// Open connects (the password from the spec's credential), checks the table and its columns
// with the server, and in a checkpointed job settles what an earlier attempt of this subtask
// prepared (postgres_commit.go).
func (s *postgresSink) Open(ctx context.Context) error {
	s.ctx = ctx
	cfg, err := pgx.ParseConfig(s.spec.GetUrl())
	if err != nil {
		return fmt.Errorf("postgres_sink: url: %w", err)
	}
	if name := s.spec.GetCredential(); name != "" {
		if s.info.Secret == nil {
			return fmt.Errorf("postgres_sink: credential %q: this task has no credentials to read (the TaskManager's --secrets-dir)", name)
		}
		b, err := s.info.Secret(name)
		if err != nil {
			return fmt.Errorf("postgres_sink: %w", err)
		}
		line, _, _ := bytes.Cut(b, []byte("\n"))
		s.password = string(bytes.TrimSuffix(line, []byte("\r")))
		cfg.Password = s.password
	}
	cfg.ConnectTimeout = postgresConnectTimeout
	s.cfg = cfg
	if s.checkpointed && len(s.gidPrefix)+20 > postgresMaxGIDBytes {
		return fmt.Errorf("postgres_sink: the name of a prepared transaction, %q and a checkpoint id, would be over the server's %d bytes", s.gidPrefix, postgresMaxGIDBytes)
	}
	if err := s.w.check(); err != nil {
		return err
	}
	if !s.checkpointed {
		return nil
	}
	return s.openCommitted()
}

// values reads r's row; reason is not empty when r has none (its dead letter's reason).
func (s *postgresSink) values(r *Record) (vals []any, reason string) {
	var doc string
	if s.needJSON {
		var ok bool
		if doc, ok = jsonDoc(r.Value); !ok {
			return nil, reasonNotJSON
		}
	}
	vals = make([]any, len(s.cols))
	for i := range s.cols {
		c := &s.cols[i]
		if c.key {
			vals[i] = string(r.Key)
			continue
		}
		res, ok := c.path.get(doc)
		if !ok {
			return nil, c.path.missing
		}
		switch res.Type {
		case gjson.Null:
			vals[i] = nil
		case gjson.String:
			vals[i] = res.Str
		default:
			vals[i] = res.Raw
		}
	}
	return vals, ""
}

// Write keeps r's row and writes the rows not sent yet once a batch is full: into the open
// transaction of a checkpointed job, else committed at once.
func (s *postgresSink) Write(r Record) error {
	if s.broken != nil {
		return s.broken
	}
	r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value) // the row's strings point into them
	vals, reason := s.values(&r)
	if reason != "" {
		return sendDeadLetter(s.info, r, reason)
	}
	s.w.rows = append(s.w.rows, pgRow{rec: r, vals: vals})
	if len(s.w.rows)-s.w.sent < s.chunk {
		return nil
	}
	if s.checkpointed {
		return s.w.run("write a batch", nil, func() error { return s.w.sendRows(s.chunk) })
	}
	return s.w.run("write and commit a batch", nil, func() error { return s.w.commit(s.chunk) })
}

// Finish commits everything: the prepared transactions, then the rows since the last barrier
// directly (every input ended: nothing is replayed any more).
func (s *postgresSink) Finish() error {
	if s.broken != nil {
		return s.broken
	}
	if s.checkpointed {
		if err := s.finishCommitted(); err != nil {
			return err
		}
	}
	return s.w.run("write and commit the last rows", nil, func() error { return s.w.commit(1) })
}

// Close ends both connections; an open transaction is rolled back by the server.
func (s *postgresSink) Close() error {
	s.w.drop()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.cconn != nil {
		_ = s.cconn.Close(context.Background())
		s.cconn = nil
	}
	return nil
}

// postgresSinkState is a checkpoint's state of the sink: the prepared transactions are on the
// server, named from the task; the state only says the sink had one.
type postgresSinkState struct {
	Prepared string `json:"prepared"` // the names' prefix
}

// SnapshotState: the marker of a checkpointed sink (its rows are in the prepared transaction
// PrepareCommit makes next).
func (s *postgresSink) SnapshotState() ([]byte, error) {
	if !s.checkpointed {
		return nil, nil
	}
	return json.Marshal(postgresSinkState{Prepared: s.gidPrefix})
}

// RestoreState reads the marker; what to commit is found on the server at Open.
func (s *postgresSink) RestoreState(b []byte) error {
	var st postgresSinkState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("postgres_sink: its checkpointed state: %w", err)
	}
	return nil
}

// redact removes the password from an error's text (the server and the client never put it
// there; this keeps it so).
func (s *postgresSink) redact(err error) error {
	if err == nil || s.password == "" || !strings.Contains(err.Error(), s.password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), s.password, "xxxxx"))
}
