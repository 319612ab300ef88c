package graph

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The bounds of a nats_source.
const (
	// MaxNatsURLBytes bounds nats_source.url (every server of the list).
	MaxNatsURLBytes = 4096
	// MaxNatsNameBytes bounds nats_source.stream and nats_source.key_header.
	MaxNatsNameBytes = 255
	// MaxNatsSubjectBytes bounds nats_source.subject.
	MaxNatsSubjectBytes = 1024
	// MaxNatsBufferedMessages bounds nats_source.max_buffered_messages.
	MaxNatsBufferedMessages = 65536
	// MaxNatsPendingAcks bounds nats_sink.max_pending_acks.
	MaxNatsPendingAcks = 65536
)

// validateNatsSource checks a nats_source: its servers' URLs, the stream's name, the subject
// filter, the key, the buffer's bound, the credential's name and the end; a BATCH job refuses
// it without an end.
func validateNatsSource(op *pb.Operator, env OperatorEnv, add addFunc) {
	n := op.GetNatsSource()
	validateNatsURL("nats_source.url", n.GetUrl(), add)
	validateNatsStream("nats_source.stream", n.GetStream(), "read", add)
	if s := n.GetSubject(); s != "" {
		if reason := natsSubjectError(s); reason != "" {
			add("nats_source.subject", "%q %s", s, reason)
		}
	}
	switch k := n.GetKey(); k {
	case pb.NatsKey_NATS_KEY_UNSPECIFIED, pb.NatsKey_NATS_KEY_NONE, pb.NatsKey_NATS_KEY_SUBJECT:
		if n.GetKeyHeader() != "" {
			add("nats_source.key_header", "is set, but key is %s (NATS_KEY_HEADER reads it)", k)
		}
	case pb.NatsKey_NATS_KEY_HEADER:
		switch h := n.GetKeyHeader(); {
		case h == "":
			add("nats_source.key_header", "is empty, and key is NATS_KEY_HEADER")
		default:
			validateNatsHeader("nats_source.key_header", h, add)
		}
	default:
		add("nats_source.key", "%d is not a NatsKey (%d to %d)", int32(k), int32(pb.NatsKey_NATS_KEY_UNSPECIFIED), int32(pb.NatsKey_NATS_KEY_HEADER))
	}
	if b := n.GetMaxBufferedMessages(); b < 0 || b > MaxNatsBufferedMessages {
		add("nats_source.max_buffered_messages", "%d is out of range [0, MaxNatsBufferedMessages %d]", b, MaxNatsBufferedMessages)
	}
	validateCredential("nats_source.credential", n.GetCredential(), add)
	switch stop := n.GetStopAtSequence(); {
	case stop < 0:
		add("nats_source.stop_at_sequence", "%d is negative (0: no end)", stop)
	case stop == 0 && env.JobType == pb.JobType_JOB_TYPE_BATCH:
		add("nats_source", "a BATCH job needs bounded sources (a JetStream stream has no end: set stop_at_sequence)")
	}
}

// validateNatsSink checks a nats_sink: its servers' URLs, the stream's name, the subject (no
// wildcard), the key header, the credential's name and the bound on pending acks.
func validateNatsSink(op *pb.Operator, _ OperatorEnv, add addFunc) {
	n := op.GetNatsSink()
	validateNatsURL("nats_sink.url", n.GetUrl(), add)
	validateNatsStream("nats_sink.stream", n.GetStream(), "publish to", add)
	switch s := n.GetSubject(); {
	case s == "":
		add("nats_sink.subject", "is empty (the subject every record is published to)")
	case natsSubjectError(s) != "":
		add("nats_sink.subject", "%q %s", s, natsSubjectError(s))
	case strings.ContainsAny(s, "*>"):
		add("nats_sink.subject", "%q holds a wildcard (a record is published to one subject)", s)
	}
	if h := n.GetKeyHeader(); h != "" {
		validateNatsHeader("nats_sink.key_header", h, add)
	}
	validateCredential("nats_sink.credential", n.GetCredential(), add)
	if b := n.GetMaxPendingAcks(); b < 0 || b > MaxNatsPendingAcks {
		add("nats_sink.max_pending_acks", "%d is out of range [0, MaxNatsPendingAcks %d]", b, MaxNatsPendingAcks)
	}
}

// validateNatsStream checks a stream's name; what says what the connector does with it.
func validateNatsStream(field, s, what string, add addFunc) {
	switch {
	case s == "":
		add(field, "is empty (the name of the JetStream stream to %s)", what)
	case len(s) > MaxNatsNameBytes:
		add(field, "is %d bytes, over MaxNatsNameBytes %d", len(s), MaxNatsNameBytes)
	case strings.ContainsAny(s, " \t\r\n.*>/\\\x00"):
		add(field, "%q holds a space, '.', '*', '>', '/', '\\\\' or NUL (not a stream name)", s)
	}
}

// validateNatsHeader checks a header's name.
func validateNatsHeader(field, h string, add addFunc) {
	switch {
	case len(h) > MaxNatsNameBytes:
		add(field, "is %d bytes, over MaxNatsNameBytes %d", len(h), MaxNatsNameBytes)
	case strings.ContainsAny(h, " \t\r\n:\x00"):
		add(field, "%q holds a space, ':' or NUL (not a header name)", h)
	}
}

// validateNatsURL checks url: one server or several separated by commas, each
// nats://host:port or tls://host:port, without credentials (they are a credential's, in the
// TaskManager's --secrets-dir).
func validateNatsURL(field, u string, add addFunc) {
	if u == "" {
		add(field, "is empty (a server's URL, \"nats://127.0.0.1:4222\")")
		return
	}
	if len(u) > MaxNatsURLBytes {
		add(field, "is %d bytes, over MaxNatsURLBytes %d", len(u), MaxNatsURLBytes)
		return
	}
	for i, s := range strings.Split(u, ",") {
		p, err := url.Parse(strings.TrimSpace(s))
		switch {
		case err != nil:
			add(field, "server %d of the list is not a URL: %v", i+1, urlErrorCause(err))
		case p.Scheme != "nats" && p.Scheme != "tls":
			add(field, "%q: scheme %q is not nats or tls", s, p.Scheme)
		case p.Hostname() == "":
			add(field, "%q has no host", s)
		case p.User != nil:
			add(field, "%q holds credentials (name a credential in the TaskManager's --secrets-dir instead)", p.Redacted())
		default:
			continue
		}
		return
	}
}

// natsSubjectError says why s is not a subject filter, or "" when it is one: tokens separated
// by '.', none empty or holding a space, '*' a whole token, '>' the last whole token.
func natsSubjectError(s string) string {
	if len(s) > MaxNatsSubjectBytes {
		return fmt.Sprintf("is %d bytes, over MaxNatsSubjectBytes %d", len(s), MaxNatsSubjectBytes)
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return "has an empty token (a subject is tokens separated by '.')"
		case strings.ContainsAny(t, " \t\r\n\x00"):
			return "holds a space or NUL"
		case t == ">" && i != len(toks)-1:
			return "has '>' before its last token"
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return "has '*' or '>' inside a token (a wildcard is a whole token)"
		}
	}
	return ""
}
