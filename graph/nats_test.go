package graph

import (
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestNatsSourceValidation: a nats_source needs a nats:// or tls:// URL without credentials, a
// stream name, a subject filter of whole-token wildcards, a header with key NATS_KEY_HEADER
// only, a bounded buffer and a STREAMING job; each refusal names the field and the rule.
func TestNatsSourceValidation(t *testing.T) {
	ok := func() *pb.NatsSource {
		return &pb.NatsSource{Url: "nats://127.0.0.1:4222", Stream: "ORDERS", Subject: "orders.*.paid"}
	}
	for _, c := range []struct {
		name   string
		mutate func(n *pb.NatsSource)
		batch  bool
		field  string
		want   string
	}{
		{"valid", func(*pb.NatsSource) {}, false, "", ""},
		{"servers", func(n *pb.NatsSource) { n.Url = "nats://a:4222, tls://b:4222"; n.Subject = "" }, false, "", ""},
		{"header key", func(n *pb.NatsSource) { n.Key, n.KeyHeader = pb.NatsKey_NATS_KEY_HEADER, "Tenant" }, false, "", ""},
		{"no url", func(n *pb.NatsSource) { n.Url = "" }, false, "nats_source.url", "is empty"},
		{"http url", func(n *pb.NatsSource) { n.Url = "http://a:4222" }, false, "nats_source.url", `scheme "http" is not nats or tls`},
		{"no host", func(n *pb.NatsSource) { n.Url = "nats://:4222" }, false, "nats_source.url", "has no host"},
		{"credentials", func(n *pb.NatsSource) { n.Url = "nats://u:p@a:4222" }, false, "nats_source.url", "holds credentials"},
		{"long url", func(n *pb.NatsSource) { n.Url = "nats://" + strings.Repeat("a", MaxNatsURLBytes) }, false, "nats_source.url", "over MaxNatsURLBytes 4096"},
		{"no stream", func(n *pb.NatsSource) { n.Stream = "" }, false, "nats_source.stream", "is empty"},
		{"dotted stream", func(n *pb.NatsSource) { n.Stream = "a.b" }, false, "nats_source.stream", "not a stream name"},
		{"long stream", func(n *pb.NatsSource) { n.Stream = strings.Repeat("S", MaxNatsNameBytes+1) }, false, "nats_source.stream", "over MaxNatsNameBytes 255"},
		{"empty token", func(n *pb.NatsSource) { n.Subject = "orders..paid" }, false, "nats_source.subject", "empty token"},
		{"gt not last", func(n *pb.NatsSource) { n.Subject = "orders.>.paid" }, false, "nats_source.subject", "'>' before its last token"},
		{"partial wildcard", func(n *pb.NatsSource) { n.Subject = "orders.p*" }, false, "nats_source.subject", "inside a token"},
		{"space", func(n *pb.NatsSource) { n.Subject = "orders paid" }, false, "nats_source.subject", "space"},
		{"long subject", func(n *pb.NatsSource) { n.Subject = strings.Repeat("a", MaxNatsSubjectBytes+1) }, false, "nats_source.subject", "over MaxNatsSubjectBytes 1024"},
		{"header without key", func(n *pb.NatsSource) { n.KeyHeader = "Tenant" }, false, "nats_source.key_header", "NATS_KEY_HEADER reads it"},
		{"header key no header", func(n *pb.NatsSource) { n.Key = pb.NatsKey_NATS_KEY_HEADER }, false, "nats_source.key_header", "is empty"},
		{"bad key", func(n *pb.NatsSource) { n.Key = 9 }, false, "nats_source.key", "9 is not a NatsKey"},
		{"buffer", func(n *pb.NatsSource) { n.MaxBufferedMessages = MaxNatsBufferedMessages + 1 }, false, "nats_source.max_buffered_messages", "MaxNatsBufferedMessages 65536"},
		{"negative buffer", func(n *pb.NatsSource) { n.MaxBufferedMessages = -1 }, false, "nats_source.max_buffered_messages", "out of range"},
		{"batch", func(*pb.NatsSource) {}, true, "nats_source", "BATCH job needs bounded sources"},
	} {
		n := ok()
		c.mutate(n)
		env := OperatorEnv{JobType: pb.JobType_JOB_TYPE_STREAMING}
		if c.batch {
			env.JobType = pb.JobType_JOB_TYPE_BATCH
		}
		ps := ValidateOperator(&pb.Operator{Kind: &pb.Operator_NatsSource{NatsSource: n}}, env)
		if c.want == "" {
			if len(ps) != 0 {
				t.Errorf("%s refused: %v", c.name, ps)
			}
			continue
		}
		if len(ps) != 1 || ps[0].Field != c.field || !strings.Contains(ps[0].Message, c.want) {
			t.Errorf("%s: %v, want one problem of %s like %q", c.name, ps, c.field, c.want)
		}
	}
}
