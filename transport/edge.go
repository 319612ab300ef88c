package transport

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Guard is what the edge asks the process a server belongs to. A JobMaster replica's guard
// (jmserver) knows its leadership, its gate, the leader to forward to and the
// clients' write limits; a TaskManager has none (nil), so its rows must all be Local.
type Guard interface {
	// Limit admits a call of a Limited method or refuses it.
	Limit(ctx context.Context) error
	// Admit returns nil when this node may serve a call with policy p now, or the sentinel
	// error that refuses it (not the leader, reconciling). consistent: the request asks for a
	// consistent read.
	Admit(ctx context.Context, p Policy, consistent bool) error
	// Forwardable reports whether a call refused here with err may be forwarded to the
	// leader: err says this node is not the leader and the call was not forwarded already.
	Forwardable(ctx context.Context, err error) bool
	// Forward runs the unary method with req on the leader and returns the leader's reply.
	Forward(ctx context.Context, method string, req any) (any, error)
	// Status turns an error of the guard or of a handler into a gRPC status error.
	Status(ctx context.Context, err error) error
}

// NewServer builds a gRPC server of either process with the edge installed: the message size
// bounds of ServerOptions, the policy interceptor (unary and stream) with guard g (nil on a
// TaskManager), and the registrar to register the services through (see Registrar). Check the
// registered services with MustCover.
//
// With auth.TLS, the server speaks mutual TLS only: a client must present a certificate of the
// CA naming one of the roles in auth.Admit (nil: any role), or, with auth.Tokens, a bearer
// token, and every call is checked against its row's Roles. Without (a zero Auth), the server
// is plaintext and admits every caller.
func NewServer(limit int, who string, g Guard, auth Auth, observe ...CallObserver) (*grpc.Server, grpc.ServiceRegistrar) {
	e := &edge{g: g, who: who, auth: auth}
	unary, stream := []grpc.UnaryServerInterceptor{e.unary}, []grpc.StreamServerInterceptor{e.stream}
	for _, o := range observe {
		// Outside the edge: a refusal is observed like any other outcome.
		unary = append([]grpc.UnaryServerInterceptor{o.unary}, unary...)
		stream = append([]grpc.StreamServerInterceptor{o.stream}, stream...)
	}
	opts := append(ServerOptions(limit), grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	opts = append(opts, auth.serverOptions()...)
	s := grpc.NewServer(opts...)
	return s, Registrar(s, limit, who)
}

// CallObserver is told of every call a server served: its method, how long it took and its
// outcome (a status error, or nil). Metrics use it.
type CallObserver func(method string, took time.Duration, err error)

func (o CallObserver) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	reply, err := handler(ctx, req)
	o(info.FullMethod, time.Since(start), err)
	return reply, err
}

func (o CallObserver) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	o(info.FullMethod, time.Since(start), err)
	return err
}

// edge applies the Policies table to every call of one server.
type edge struct {
	g    Guard
	who  string
	auth Auth
}

func (e *edge) policy(method string) (Policy, error) {
	p, ok := Policies[method]
	if !ok {
		return Policy{}, status.Errorf(codes.Unimplemented, "%s has no policy row on this %s (transport.Policies)", method, e.who)
	}
	if e.g == nil && (p.needsLeader(true) || p.Forward || p.Limited) {
		return Policy{}, status.Errorf(codes.Internal, "%s: its policy row needs a JobMaster, not a %s", method, e.who)
	}
	return p, nil
}

func (e *edge) status(ctx context.Context, err error) error {
	if err == nil || e.g == nil {
		return err
	}
	return e.g.Status(ctx, err)
}

func (e *edge) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, err := e.policy(info.FullMethod)
	if err != nil {
		return nil, err
	}
	if ctx, err = e.auth.authorize(ctx, info.FullMethod, p); err != nil {
		return nil, err
	}
	if e.g == nil {
		return handler(ctx, req)
	}
	if p.Limited {
		if err := e.g.Limit(ctx); err != nil {
			return nil, e.status(ctx, err)
		}
	}
	if p.needsLeader(consistent(req)) {
		if err := e.g.Admit(ctx, p, consistent(req)); err != nil {
			if p.Forward && e.g.Forwardable(ctx, err) {
				return e.forward(ctx, info.FullMethod, req)
			}
			return nil, e.status(ctx, err)
		}
	}
	reply, err := handler(ctx, req)
	if err != nil && p.Forward && e.g.Forwardable(ctx, err) {
		return e.forward(ctx, info.FullMethod, req)
	}
	return reply, e.status(ctx, err)
}

func (e *edge) forward(ctx context.Context, method string, req any) (any, error) {
	reply, err := e.g.Forward(ctx, method, req)
	if err != nil {
		return nil, e.status(ctx, err)
	}
	return reply, nil
}

func (e *edge) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	p, err := e.policy(info.FullMethod)
	if err != nil {
		return err
	}
	if _, err := e.auth.authorize(ss.Context(), info.FullMethod, p); err != nil {
		return err
	}
	if e.g != nil && p.needsLeader(false) {
		if err := e.g.Admit(ss.Context(), p, false); err != nil {
			return e.status(ss.Context(), err)
		}
	}
	return e.status(ss.Context(), handler(srv, ss))
}

// consistent reports whether req asks for a consistent read.
func consistent(req any) bool {
	c, ok := req.(interface{ GetConsistent() bool })
	return ok && c.GetConsistent()
}

// Uncovered lists the methods registered on s that the table does not cover as it must: no
// row, a row without a role rule, a row a server without a guard (a TaskManager's) cannot apply, forwarding or a
// consistent-read rule on a streaming method, or a forwardable method whose reply type is
// unknown.
func Uncovered(s *grpc.Server, guarded bool) []string {
	var out []string
	for svc, info := range s.GetServiceInfo() {
		for _, m := range info.Methods {
			name := "/" + svc + "/" + m.Name
			p, ok := Policies[name]
			stream := m.IsClientStream || m.IsServerStream
			switch {
			case !ok:
				out = append(out, name+": no policy row")
			case len(p.Roles) == 0:
				out = append(out, name+": the row admits no role (Roles)")
			case !guarded && (p.needsLeader(true) || p.Forward || p.Limited):
				out = append(out, name+": the row needs a JobMaster's guard")
			case stream && (p.Forward || p.Leader == LeaderIfConsistent || p.Limited):
				out = append(out, name+": forwarding, consistent reads and write limits are for unary methods")
			case p.Forward:
				if _, err := NewReply(name); err != nil {
					out = append(out, name+": "+err.Error())
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// MustCover panics when Uncovered finds anything: a method without a policy row is a
// programming error, caught by the tests that build each process's servers.
func MustCover(s *grpc.Server, guarded bool) {
	if bad := Uncovered(s, guarded); len(bad) > 0 {
		panic("transport: the policy table does not cover: " + strings.Join(bad, "; "))
	}
}

// NewReply returns an empty reply message of a unary method given by its full name
// ("/pkg.Service/Method"), found in the registered protobuf descriptors; forwarding needs it.
func NewReply(method string) (proto.Message, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, fmt.Errorf("method name %q is not /service/method", method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, fmt.Errorf("service %s has no method %s", svc, name)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, fmt.Errorf("reply of %s: %w", method, err)
	}
	return mt.New().Interface(), nil
}
