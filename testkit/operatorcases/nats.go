package operatorcases

import (
	"github.com/jmcluster/jmcluster/transport/pb"
)

// natsCases are the cases of the nats_source kind: one bad case per rule of graph/nats.go. The
// good ones name a server that does not run: a task started from them fails to connect.
func natsCases() []Case {
	base := func() *pb.NatsSource {
		return &pb.NatsSource{Url: "nats://127.0.0.1:1", Stream: "ORDERS", Subject: "orders.>"}
	}
	op := func(mutate func(n *pb.NatsSource)) *pb.Operator {
		n := base()
		mutate(n)
		return &pb.Operator{Kind: &pb.Operator_NatsSource{NatsSource: n}}
	}
	good := func(name string, mutate func(n *pb.NatsSource)) Case {
		return Case{Name: name, Kind: "nats_source", Op: op(mutate), Wiring: Feeds}
	}
	bad := func(name string, mutate func(n *pb.NatsSource), field, msg string) Case {
		return Case{Name: name, Kind: "nats_source", Op: op(mutate), Wiring: Feeds, Field: "operator.nats_source" + field, Msg: msg}
	}
	return []Case{
		good("nats source", func(*pb.NatsSource) {}),
		good("nats source keyed by header", func(n *pb.NatsSource) {
			n.Key, n.KeyHeader, n.MaxBufferedMessages = pb.NatsKey_NATS_KEY_HEADER, "Tenant", 65536
		}),
		bad("nats source without url", func(n *pb.NatsSource) { n.Url = "" }, ".url", "is empty"),
		bad("nats source of http", func(n *pb.NatsSource) { n.Url = "http://a:1" }, ".url", `scheme "http" is not nats or tls`),
		bad("nats source with credentials", func(n *pb.NatsSource) { n.Url = "nats://u:p@a:1" }, ".url", "holds credentials"),
		good("nats source with a credential", func(n *pb.NatsSource) { n.Credential = "nats-orders.creds" }),
		bad("nats source of a credential path", func(n *pb.NatsSource) { n.Credential = "../etc/passwd" }, ".credential", "is not a credential's name"),
		bad("nats source without stream", func(n *pb.NatsSource) { n.Stream = "" }, ".stream", "is empty"),
		bad("nats source of a bad subject", func(n *pb.NatsSource) { n.Subject = "a.>.b" }, ".subject", "'>' before its last token"),
		bad("nats source header key without header", func(n *pb.NatsSource) { n.Key = pb.NatsKey_NATS_KEY_HEADER }, ".key_header", "is empty"),
		bad("nats source buffer over the bound", func(n *pb.NatsSource) { n.MaxBufferedMessages = 65537 }, ".max_buffered_messages", "MaxNatsBufferedMessages 65536"),
		{Name: "nats source in a batch job", Kind: "nats_source", Op: op(func(*pb.NatsSource) {}), JobType: pb.JobType_JOB_TYPE_BATCH, Wiring: Feeds,
			Field: "operator.nats_source", Msg: "a BATCH job needs bounded sources"},
		{Name: "bounded nats source in a batch job", Kind: "nats_source", Op: op(func(n *pb.NatsSource) { n.StopAtSequence = 1000 }), JobType: pb.JobType_JOB_TYPE_BATCH, Wiring: Feeds},
		bad("nats source ending before the start", func(n *pb.NatsSource) { n.StopAtSequence = -1 }, ".stop_at_sequence", "-1 is negative"),
	}
}

// natsSinkCases are the cases of the nats_sink kind: one bad case per rule of graph/nats.go.
// The good ones name a server that does not run.
func natsSinkCases() []Case {
	op := func(mutate func(n *pb.NatsSink)) *pb.Operator {
		n := &pb.NatsSink{Url: "nats://127.0.0.1:1", Stream: "TOTALS", Subject: "totals.minute"}
		mutate(n)
		return &pb.Operator{Kind: &pb.Operator_NatsSink{NatsSink: n}}
	}
	good := func(name string, mutate func(n *pb.NatsSink)) Case {
		return Case{Name: name, Kind: "nats_sink", Op: op(mutate), Wiring: Fed}
	}
	bad := func(name string, mutate func(n *pb.NatsSink), field, msg string) Case {
		return Case{Name: name, Kind: "nats_sink", Op: op(mutate), Wiring: Fed, Field: "operator.nats_sink" + field, Msg: msg}
	}
	return []Case{
		good("nats sink", func(*pb.NatsSink) {}),
		good("nats sink with key header and credential", func(n *pb.NatsSink) {
			n.KeyHeader, n.Credential, n.MaxPendingAcks = "Jm-Key", "nats_sink-1", 65536
		}),
		bad("nats sink without url", func(n *pb.NatsSink) { n.Url = "" }, ".url", "is empty"),
		bad("nats sink with a password in its url", func(n *pb.NatsSink) { n.Url = "nats://u:secret@a:1" }, ".url", `"nats://u:xxxxx@a:1" holds credentials`),
		bad("nats sink without stream", func(n *pb.NatsSink) { n.Stream = "" }, ".stream", "is empty"),
		bad("nats sink of a dotted stream", func(n *pb.NatsSink) { n.Stream = "a.b" }, ".stream", "not a stream name"),
		bad("nats sink without subject", func(n *pb.NatsSink) { n.Subject = "" }, ".subject", "is empty"),
		bad("nats sink to a wildcard", func(n *pb.NatsSink) { n.Subject = "totals.*" }, ".subject", "holds a wildcard"),
		bad("nats sink to a bad subject", func(n *pb.NatsSink) { n.Subject = "a..b" }, ".subject", "has an empty token"),
		bad("nats sink of a bad header", func(n *pb.NatsSink) { n.KeyHeader = "a:b" }, ".key_header", "not a header name"),
		bad("nats sink of a hidden credential", func(n *pb.NatsSink) { n.Credential = ".env" }, ".credential", "is not a credential's name"),
		bad("nats sink acks over the bound", func(n *pb.NatsSink) { n.MaxPendingAcks = 65537 }, ".max_pending_acks", "MaxNatsPendingAcks 65536"),
	}
}
