package transport

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// DefaultMaxMessageSize bounds every gRPC message jmcluster sends or receives, on every server
// and every client, unless MaxMessageSizeFlag sets another bound (4 MiB: gRPC's own receive
// default, made explicit and applied to sending as well). It is the one source of the limit:
// whatever grows with a job (TaskManager reports, job views) is chunked or paged to stay
// under it.
const DefaultMaxMessageSize = 4 << 20

// MaxMessageSizeFlag is the setting every refusal of an oversized message names.
const MaxMessageSizeFlag = "--max-message-size"

// The range of --max-message-size that jmnode's processes accept. The floor is the limit the
// chunked streams, pages and batches are cut for (ChunkedMessageLimit: TaskManager reports,
// GetJob pages, SubmitTasks batches, each up to ChunkBudget(0) bytes), so a smaller limit
// would refuse what the other side sends; the ceiling stays clear of protobuf's 2 GiB bound on
// one message. The library configs accept any positive limit (tests provoke refusals with
// small ones).
const (
	MinMaxMessageSize = ChunkedMessageLimit
	MaxMaxMessageSize = 1 << 30
)

// Slots a TaskManager may offer: the leader refuses a registration outside [MinSlots,
// MaxSlots] (jobmaster.RegisterTaskManager), and a TaskManager refuses to start with such a
// setting (taskmanager.Config.Validate, --slots), so the limit lives in one place.
const (
	MinSlots = 1
	MaxSlots = 1024
)

// MessageSize returns limit, or DefaultMaxMessageSize when limit is not positive.
func MessageSize(limit int) int {
	if limit <= 0 {
		return DefaultMaxMessageSize
	}
	return limit
}

// ServerOptions bound what a gRPC server receives and sends to limit (0: the default).
// gRPC checks the received size from the message's length prefix, before it reads or decodes
// the message, so an oversized request costs the server no memory. Register the services
// through Registrar so that replies over the limit are refused naming it.
//
// The servers accept the clients' keepalive pings (KeepaliveDialOption) as often as every
// KeepaliveMinTime while a call is open; gRPC's default, one every five minutes, would answer
// the second with GOAWAY and close a connection that is working.
func ServerOptions(limit int) []grpc.ServerOption {
	limit = MessageSize(limit)
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime}),
	}
}

// ReconnectMaxDelay bounds the reconnection backoff of every connection between jmcluster
// processes.
const ReconnectMaxDelay = time.Second

// Keepalive of the control connections between TaskManagers and JobMasters (KeepaliveDialOption):
// a client that has read nothing for KeepaliveTime while a call is open pings the server, and
// closes the connection when KeepaliveTimeout passes without an answer; the next call dials a
// new one. Without it a connection whose packets were dropped for a few seconds stays stuck
// long after the network heals: TCP doubles its retransmission timeout with every retry (to
// 13 s, then 26 s, after eight seconds of drops), so every call on it times out while a new
// connection would work at once (jepsen tms-from-leader seed 3: a TaskManager missed three
// healed windows and reached the leader only 40 s later). A stuck connection is thus replaced
// at most KeepaliveTime + KeepaliveTimeout after its last answer. KeepaliveTime is gRPC's
// smallest client ping interval.
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 3 * time.Second
	// KeepaliveMinTime is how often a server lets a client ping (below KeepaliveTime).
	KeepaliveMinTime = 5 * time.Second
)

// DialOptions bound what every call of a client connection sends and receives to limit (0: the
// default), and turn gRPC's own refusals of an oversized message into MessageTooLargeError
// naming whose limit it is (who — "TaskManager", "jmnode client", ... — or the server) and the
// setting. Reconnection backs off to ReconnectMaxDelay at most.
func DialOptions(limit int, who string) []grpc.DialOption {
	l := sizeLimit{limit: MessageSize(limit), who: who}
	return []grpc.DialOption{
		// Reconnect within ReconnectMaxDelay of a peer coming back: gRPC's default backoff grows
		// to two minutes, and a TaskManager whose connections backed off through a minute-long
		// JobMaster outage reached the new leader only 11 s after it was established (calls on
		// a connection in backoff fail at once without trying).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ReconnectMaxDelay},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(l.limit), grpc.MaxCallSendMsgSize(l.limit)),
		grpc.WithChainUnaryInterceptor(l.unaryClient),
		grpc.WithChainStreamInterceptor(l.streamClient),
	}
}

// KeepaliveDialOption is the keepalive of the control connections between TaskManagers and
// JobMasters, whose calls are short and bounded. gRPC also sets TCP_USER_TIMEOUT to
// KeepaliveTimeout on the connection's socket, so the kernel aborts it when what it sent stays
// unacknowledged that long (a partition of a few seconds): the next call dials anew, which is
// what a control call wants. The data plane (Exchange streams between TaskManagers) and the
// clients do without: a data stream may be silent for long (a quiet source), a server of an
// earlier build answers pings on a silent stream with GOAWAY too_many_pings after three (its
// gRPC default allows one every five minutes), and an aborted data stream fails its tasks.
func KeepaliveDialOption() grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout})
}

// MessageTooLargeError is the refusal of a message over a limit: RESOURCE_EXHAUSTED with the
// reason MESSAGE_TOO_LARGE, the size (when known, else -1), the limit and the setting.
// what is "request" or "reply"; who names whose limit it is.
func MessageTooLargeError(what string, size int, who string, limit int, cause string) error {
	msg := fmt.Sprintf("%s of %d bytes is over the %s's message limit of %d bytes (%s)", what, size, who, limit, MaxMessageSizeFlag)
	if size < 0 {
		msg = fmt.Sprintf("%s is over the %s's message limit of %d bytes (%s): %s", what, who, limit, MaxMessageSizeFlag, cause)
	}
	md := map[string]string{"limit": strconv.Itoa(limit), "setting": MaxMessageSizeFlag, "message": what}
	if size >= 0 {
		md["size"] = strconv.Itoa(size)
	}
	st := status.New(codes.ResourceExhausted, msg)
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonMessageTooLarge, Domain: ErrorDomain, Metadata: md})
	return st.Err()
}

// IsMessageTooLarge reports whether err is a refusal of an oversized message.
func IsMessageTooLarge(err error) bool { return Reason(err) == ReasonMessageTooLarge }

// sizeLimit names one side's limit in the errors of messages over it.
type sizeLimit struct {
	limit int
	who   string
}

// grpcSizes finds "(N vs. M)" in gRPC's own size refusals.
var grpcSizes = regexp.MustCompile(`\((\d+) vs\. (\d+)\)`)

// serverRoles names who serves each service, for the refusals a client reads from a server.
var serverRoles = map[string]string{
	pb.ClientService_ServiceDesc.ServiceName:      "JobMaster",
	pb.OperatorService_ServiceDesc.ServiceName:    "JobMaster",
	pb.JobMasterService_ServiceDesc.ServiceName:   "JobMaster",
	pb.TaskManagerService_ServiceDesc.ServiceName: "TaskManager",
	pb.DataService_ServiceDesc.ServiceName:        "TaskManager",
}

// serverRole is who serves method ("/service/Method"), or "server".
func serverRole(method string) string {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if r, ok := serverRoles[svc]; ok {
		return r
	}
	return "server"
}

// explain turns gRPC's own ResourceExhausted size refusal, seen by a client that called method
// and last sent the message sent, into MessageTooLargeError naming whose limit it was. Every
// other error, and a refusal that already names its limit (it carries a reason), is returned
// as it is. gRPC refuses four ways, each "(N vs. M)": the client will not send a request over
// its limit ("trying to send", N the request's size); the server will not read a request over
// its own ("received message", sent back; N the request's size, M the server's limit); the
// client will not read a reply over its limit ("received message", N the reply's size, M the
// client's limit); a server that does not measure its replies first will not send one over its
// limit ("trying to send", sent back; N the reply's size).
func (l sizeLimit) explain(method string, sent any, err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted || Reason(err) != "" || !strings.Contains(st.Message(), "larger than max") {
		return err
	}
	size, max := -1, -1
	if m := grpcSizes.FindStringSubmatch(st.Message()); m != nil {
		size, _ = strconv.Atoi(m[1])
		max, _ = strconv.Atoi(m[2])
	}
	ours := size < 0 || size == messageSize(sent) // the refused message is the one this client sent
	switch {
	case strings.Contains(st.Message(), "trying to send") && ours:
		return MessageTooLargeError("request", size, l.who, l.limit, st.Message())
	case strings.Contains(st.Message(), "trying to send"): // a server that does not name its limit
		return MessageTooLargeError("reply", size, serverRole(method), max, st.Message())
	case max > 0 && (max != l.limit || ours):
		return MessageTooLargeError("request", size, serverRole(method), max, st.Message())
	}
	return MessageTooLargeError("reply", size, l.who, l.limit, st.Message())
}

func messageSize(m any) int {
	if pm, ok := m.(proto.Message); ok && pm != nil {
		return proto.Size(pm)
	}
	return -1
}

func (l sizeLimit) unaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return l.explain(method, req, invoker(ctx, method, req, reply, cc, opts...))
}

func (l sizeLimit) streamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, l.explain(method, nil, err)
	}
	return &limitedClientStream{ClientStream: cs, l: l, method: method}, nil
}

// limitedClientStream names the limits in a stream's errors; it remembers the last message sent
// (a stream's send and receive may run on two goroutines).
type limitedClientStream struct {
	grpc.ClientStream
	l      sizeLimit
	method string
	mu     sync.Mutex
	sent   any
}

func (s *limitedClientStream) SendMsg(m any) error {
	s.mu.Lock()
	s.sent = m
	s.mu.Unlock()
	return s.l.explain(s.method, m, s.ClientStream.SendMsg(m))
}

func (s *limitedClientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		return nil
	}
	s.mu.Lock()
	sent := s.sent
	s.mu.Unlock()
	return s.l.explain(s.method, sent, err)
}

// Registrar registers services on s so that a reply over the server's limit is refused with
// MessageTooLargeError naming who and the setting, instead of gRPC's bare "trying to send
// message larger than max (N vs. M)": each unary reply and each streamed message is measured
// before gRPC would refuse it. A request over the limit is refused by gRPC itself, from the
// length prefix, before the message is read and before any handler or interceptor runs (and
// gRPC writes that status at once, so no server code can reword it): any client sees
// "grpc: received message larger than max (N vs. M)", N the request's size and M this limit,
// and jmcluster's clients (DialOptions) turn it into MessageTooLargeError naming the server.
// limit must be the one given to ServerOptions.
func Registrar(s *grpc.Server, limit int, who string) grpc.ServiceRegistrar {
	return &registrar{s: s, l: sizeLimit{limit: MessageSize(limit), who: who}}
}

type registrar struct {
	s *grpc.Server
	l sizeLimit
}

// tooLarge is the refusal of a reply m over the limit, or nil.
func (l sizeLimit) tooLarge(m any) error {
	if n := messageSize(m); n > l.limit {
		return MessageTooLargeError("reply", n, l.who, l.limit, "")
	}
	return nil
}

func (r *registrar) RegisterService(sd *grpc.ServiceDesc, impl any) {
	d := *sd
	d.Methods = make([]grpc.MethodDesc, len(sd.Methods))
	for i, m := range sd.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			reply, err := h(srv, ctx, dec, in)
			if err != nil {
				return nil, err
			}
			if err := r.l.tooLarge(reply); err != nil {
				return nil, err
			}
			return reply, nil
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(sd.Streams))
	for i, st := range sd.Streams {
		h := st.Handler
		st.Handler = func(srv any, ss grpc.ServerStream) error {
			return h(srv, &limitedServerStream{ServerStream: ss, l: r.l})
		}
		d.Streams[i] = st
	}
	r.s.RegisterService(&d, impl)
}

type limitedServerStream struct {
	grpc.ServerStream
	l sizeLimit
}

func (s *limitedServerStream) SendMsg(m any) error {
	if err := s.l.tooLarge(m); err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}
