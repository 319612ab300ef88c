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
		bad("nats source without stream", func(n *pb.NatsSource) { n.Stream = "" }, ".stream", "is empty"),
		bad("nats source of a bad subject", func(n *pb.NatsSource) { n.Subject = "a.>.b" }, ".subject", "'>' before its last token"),
		bad("nats source header key without header", func(n *pb.NatsSource) { n.Key = pb.NatsKey_NATS_KEY_HEADER }, ".key_header", "is empty"),
		bad("nats source buffer over the bound", func(n *pb.NatsSource) { n.MaxBufferedMessages = 65537 }, ".max_buffered_messages", "MaxNatsBufferedMessages 65536"),
		{Name: "nats source in a batch job", Kind: "nats_source", Op: op(func(*pb.NatsSource) {}), JobType: pb.JobType_JOB_TYPE_BATCH, Wiring: Feeds,
			Field: "operator.nats_source", Msg: "a BATCH job needs bounded sources"},
	}
}
