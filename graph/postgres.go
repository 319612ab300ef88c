package graph

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The bounds of a postgres_sink.
const (
	// MaxPostgresURLBytes bounds postgres_sink.url.
	MaxPostgresURLBytes = 4096
	// MaxPostgresColumns bounds postgres_sink.columns.
	MaxPostgresColumns = 256
	// MaxPostgresBatchRows bounds postgres_sink.batch_rows.
	MaxPostgresBatchRows = 10000
	// MaxPostgresIdentifierBytes is PostgreSQL's own bound on a name (NAMEDATALEN - 1).
	MaxPostgresIdentifierBytes = 63
)

// sqlIdentifier is a name the sink writes into its statements as is: no quoting, so none is
// needed (PostgreSQL folds it to lower case, as it does the names of a CREATE TABLE without
// quotes).
var sqlIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validatePostgresSink checks a postgres_sink: the URL (no password in it), the table's and the
// columns' names, the columns' paths, the mode and its key columns, the batch's bound and the
// credential's name.
func validatePostgresSink(op *pb.Operator, _ OperatorEnv, add addFunc) {
	p := op.GetPostgresSink()
	validatePostgresURL(p.GetUrl(), add)
	switch t := p.GetTable(); {
	case t == "":
		add("postgres_sink.table", "is empty (\"name\" or \"schema.name\")")
	default:
		parts := strings.Split(t, ".")
		if len(parts) > 2 {
			add("postgres_sink.table", "%q has %d parts (\"name\" or \"schema.name\")", t, len(parts))
			break
		}
		for _, part := range parts {
			if reason := identifierError(part); reason != "" {
				add("postgres_sink.table", "%q: %s", t, reason)
				break
			}
		}
	}
	cols := p.GetColumns()
	switch {
	case len(cols) == 0:
		add("postgres_sink.columns", "is empty (the table's columns and the JSON field of each)")
	case len(cols) > MaxPostgresColumns:
		add("postgres_sink.columns", "has %d columns, over MaxPostgresColumns %d", len(cols), MaxPostgresColumns)
	}
	names := make([]string, 0, len(cols))
	for i, c := range cols {
		f := fmt.Sprintf("postgres_sink.columns[%d]", i)
		if reason := identifierError(c.GetName()); reason != "" {
			add(f+".name", "%q: %s", c.GetName(), reason)
		}
		if slices.Contains(names, strings.ToLower(c.GetName())) {
			add(f+".name", "%q is named twice", c.GetName())
		}
		names = append(names, strings.ToLower(c.GetName()))
		if c.GetPath() != "" {
			checkJSONPath(add, f+".path", c.GetPath())
		}
	}
	keys := p.GetKeyColumns()
	switch m := p.GetMode(); m {
	case pb.PostgresMode_POSTGRES_MODE_UNSPECIFIED, pb.PostgresMode_POSTGRES_MODE_INSERT:
		if len(keys) > 0 {
			add("postgres_sink.key_columns", "is set, but mode is %s (POSTGRES_MODE_UPSERT uses them)", m)
		}
	case pb.PostgresMode_POSTGRES_MODE_UPSERT:
		if len(keys) == 0 {
			add("postgres_sink.key_columns", "is empty, and mode is POSTGRES_MODE_UPSERT (the columns of the table's primary key or unique constraint)")
		}
		for i, k := range keys {
			if !slices.Contains(names, strings.ToLower(k)) {
				add(fmt.Sprintf("postgres_sink.key_columns[%d]", i), "%q is not one of columns", k)
			}
		}
	default:
		add("postgres_sink.mode", "%d is not a PostgresMode (%d to %d)", int32(m), int32(pb.PostgresMode_POSTGRES_MODE_UNSPECIFIED), int32(pb.PostgresMode_POSTGRES_MODE_UPSERT))
	}
	if b := p.GetBatchRows(); b < 0 || b > MaxPostgresBatchRows {
		add("postgres_sink.batch_rows", "%d is out of range [0, MaxPostgresBatchRows %d]", b, MaxPostgresBatchRows)
	}
	validateCredential("postgres_sink.credential", p.GetCredential(), add)
}

// validatePostgresURL checks a postgres_sink's URL: postgres:// or postgresql://, a host, and
// no password (in the user part or as a parameter): the password is a credential's.
func validatePostgresURL(u string, add addFunc) {
	const field = "postgres_sink.url"
	switch {
	case u == "":
		add(field, "is empty (\"postgres://user@127.0.0.1:5432/db?sslmode=disable\")")
		return
	case len(u) > MaxPostgresURLBytes:
		add(field, "is %d bytes, over MaxPostgresURLBytes %d", len(u), MaxPostgresURLBytes)
		return
	}
	p, err := url.Parse(u)
	switch {
	case err != nil:
		add(field, "is not a URL: %v", urlErrorCause(err))
	case p.Scheme != "postgres" && p.Scheme != "postgresql":
		add(field, "%q: scheme %q is not postgres or postgresql", p.Redacted(), p.Scheme)
	case p.Hostname() == "":
		add(field, "%q has no host", p.Redacted())
	default:
		if _, ok := p.User.Password(); ok || p.Query().Has("password") {
			add(field, "%q holds a password (name a credential in the TaskManager's --secrets-dir instead)", redactPostgresURL(p))
		}
	}
}

// redactPostgresURL is p with its password, in the user part or a parameter, replaced.
func redactPostgresURL(p *url.URL) string {
	q := p.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		c := *p
		c.RawQuery = q.Encode()
		return c.Redacted()
	}
	return p.Redacted()
}

// identifierError says why s is not an SQL identifier the sink writes as is, or "" when it is
// one.
func identifierError(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > MaxPostgresIdentifierBytes:
		return fmt.Sprintf("is %d bytes, over MaxPostgresIdentifierBytes %d", len(s), MaxPostgresIdentifierBytes)
	case !sqlIdentifier.MatchString(s):
		return "is not an SQL identifier (a letter or '_', then letters, digits or '_'; written without quotes)"
	}
	return ""
}
