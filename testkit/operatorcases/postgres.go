package operatorcases

import (
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// postgresCases are the cases of the postgres_sink kind: one bad case per rule of
// graph/postgres.go. The good ones name a server that does not run.
func postgresCases() []Case {
	op := func(mutate func(p *pb.PostgresSink)) *pb.Operator {
		p := &pb.PostgresSink{Url: "postgres://clicks@127.0.0.1:1/clicks?sslmode=disable", Table: "minute_totals",
			Columns: []*pb.PostgresColumn{{Name: "user_id"}, {Name: "window_start", Path: "start"}, {Name: "clicks", Path: "count"}}}
		mutate(p)
		return &pb.Operator{Kind: &pb.Operator_PostgresSink{PostgresSink: p}}
	}
	good := func(name string, mutate func(p *pb.PostgresSink)) Case {
		return Case{Name: name, Kind: "postgres_sink", Op: op(mutate), Wiring: Fed}
	}
	bad := func(name string, mutate func(p *pb.PostgresSink), field, msg string) Case {
		return Case{Name: name, Kind: "postgres_sink", Op: op(mutate), Wiring: Fed, Field: "operator.postgres_sink" + field, Msg: msg}
	}
	upsert := func(p *pb.PostgresSink) {
		p.Mode, p.KeyColumns = pb.PostgresMode_POSTGRES_MODE_UPSERT, []string{"user_id", "window_start"}
	}
	return []Case{
		good("postgres sink", func(*pb.PostgresSink) {}),
		good("postgres upsert sink", func(p *pb.PostgresSink) {
			upsert(p)
			p.Table, p.Credential, p.BatchRows, p.Url = "public.minute_totals", "pg-clicks", 10000, "postgresql://clicks@db.internal/clicks"
		}),
		bad("postgres sink without url", func(p *pb.PostgresSink) { p.Url = "" }, ".url", "is empty"),
		bad("postgres sink of mysql", func(p *pb.PostgresSink) { p.Url = "mysql://a@b/c" }, ".url", `scheme "mysql" is not postgres or postgresql`),
		bad("postgres sink without host", func(p *pb.PostgresSink) { p.Url = "postgres:///c" }, ".url", "has no host"),
		bad("postgres sink with a password", func(p *pb.PostgresSink) { p.Url = "postgres://a:secret@b/c" }, ".url", `"postgres://a:xxxxx@b/c" holds a password`),
		bad("postgres sink with a password parameter", func(p *pb.PostgresSink) { p.Url = "postgres://a@b/c?password=secret" }, ".url", "password=xxxxx"),
		bad("postgres sink over the url bound", func(p *pb.PostgresSink) { p.Url = "postgres://a@b/" + strings.Repeat("c", 4096) }, ".url", "MaxPostgresURLBytes 4096"),
		bad("postgres sink without table", func(p *pb.PostgresSink) { p.Table = "" }, ".table", "is empty"),
		bad("postgres sink of a quoted table", func(p *pb.PostgresSink) { p.Table = `"Totals"` }, ".table", "is not an SQL identifier"),
		bad("postgres sink of a three-part table", func(p *pb.PostgresSink) { p.Table = "a.b.c" }, ".table", "has 3 parts"),
		bad("postgres sink without columns", func(p *pb.PostgresSink) { p.Columns = nil }, ".columns", "is empty"),
		bad("postgres sink of a bad column", func(p *pb.PostgresSink) { p.Columns[1].Name = "start; drop table x" }, ".columns[1].name", "is not an SQL identifier"),
		bad("postgres sink of a long column", func(p *pb.PostgresSink) { p.Columns[1].Name = strings.Repeat("c", 64) }, ".columns[1].name", "MaxPostgresIdentifierBytes 63"),
		bad("postgres sink of a column twice", func(p *pb.PostgresSink) { p.Columns[2].Name = "USER_ID" }, ".columns[2].name", "is named twice"),
		bad("postgres sink of a bad path", func(p *pb.PostgresSink) { p.Columns[1].Path = "a..b" }, ".columns[1].path", "has an empty field name"),
		bad("postgres insert with key columns", func(p *pb.PostgresSink) { p.KeyColumns = []string{"user_id"} }, ".key_columns", "POSTGRES_MODE_UPSERT uses them"),
		bad("postgres upsert without key columns", func(p *pb.PostgresSink) { p.Mode = pb.PostgresMode_POSTGRES_MODE_UPSERT }, ".key_columns", "is empty"),
		bad("postgres upsert of an unknown key column", func(p *pb.PostgresSink) { upsert(p); p.KeyColumns[1] = "day" }, ".key_columns[1]", `"day" is not one of columns`),
		bad("postgres sink of an unknown mode", func(p *pb.PostgresSink) { p.Mode = 7 }, ".mode", "7 is not a PostgresMode"),
		bad("postgres batch over the bound", func(p *pb.PostgresSink) { p.BatchRows = 10001 }, ".batch_rows", "MaxPostgresBatchRows 10000"),
		bad("postgres sink of a credential path", func(p *pb.PostgresSink) { p.Credential = "a/b" }, ".credential", "is not a credential's name"),
	}
}
