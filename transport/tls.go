package transport

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/security"
)

// Role is a certificate's role (security.Role): the policy table's Roles column.
type Role = security.Role

// The roles, as the table names them.
const (
	RoleJobMaster   = security.RoleJobMaster
	RoleTaskManager = security.RoleTaskManager
	RoleOperator    = security.RoleOperator
	RoleReader      = security.RoleReader
)

// DialCredentials are the transport credentials of a connection to a server whose certificate
// must name one of want: mutual TLS with sec, or plaintext when sec is nil.
func DialCredentials(sec *security.TLS, want ...Role) grpc.DialOption {
	if sec == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(sec.ClientConfig(want...)))
}

// Caller metadata: a JobMaster forwarding a call to the leader names the caller it forwards
// for, so the leader checks (and audits) the caller's role, not the forwarder's. The leader
// believes them only from a peer whose certificate has the jobmaster role.
const (
	callerNameKey = "x-jmcluster-caller"
	callerRoleKey = "x-jmcluster-caller-role"
)

// ForwardFor adds the caller of ctx (as Caller finds it) to the outgoing metadata of a call
// forwarded on its behalf.
func ForwardFor(in, out context.Context) context.Context {
	id, ok := Caller(in)
	if !ok {
		return out
	}
	return metadata.AppendToOutgoingContext(out, callerNameKey, id.Name, callerRoleKey, string(id.Role))
}

type callerKey struct{}

// Caller is the identity of the caller of a call on a server with mutual TLS: the name and
// role of its verified certificate, or those a forwarding JobMaster vouched for. false on a
// plaintext server.
func Caller(ctx context.Context) (security.Identity, bool) {
	if id, ok := ctx.Value(callerKey{}).(security.Identity); ok {
		return id, true
	}
	return callerOf(ctx)
}

// CallerName is Caller's name for log lines: "anonymous (plaintext)" without TLS.
func CallerName(ctx context.Context) string {
	id, ok := Caller(ctx)
	if !ok {
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			return "anonymous (plaintext, " + p.Addr.String() + ")"
		}
		return "anonymous (plaintext)"
	}
	return id.String()
}

// callerOf reads the identity from the call's TLS state (and the forwarding metadata).
func callerOf(ctx context.Context) (security.Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return security.Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return security.Identity{}, false
	}
	// The leaf was verified in the handshake (security.TLS.ServerConfig) or the connection
	// would not exist.
	id, err := security.IdentityOf(info.State.PeerCertificates[0])
	if err != nil {
		return security.Identity{}, false
	}
	if id.Role != RoleJobMaster {
		return id, true
	}
	md, _ := metadata.FromIncomingContext(ctx)
	names, roles := md.Get(callerNameKey), md.Get(callerRoleKey)
	if len(names) == 1 && len(roles) == 1 && security.Role(roles[0]).Valid() {
		return security.Identity{Name: names[0], Role: security.Role(roles[0]), Via: id.Name}, true
	}
	return id, true
}

// authorize refuses PERMISSION_DENIED a caller whose role the method's row does not admit. On
// a plaintext server (no identity) every call is admitted: the plaintext mode's risk.
func authorize(ctx context.Context, method string, p Policy, tlsOn bool) (context.Context, error) {
	if !tlsOn {
		return ctx, nil
	}
	id, ok := callerOf(ctx)
	if !ok {
		return ctx, status.Errorf(codes.Unauthenticated, "%s: the call carries no verified certificate", method)
	}
	if !slices.Contains(p.Roles, id.Role) {
		return ctx, status.Errorf(codes.PermissionDenied, "%s may not call %s (roles admitted: %s)", id, method, roleNames(p.Roles))
	}
	return context.WithValue(ctx, callerKey{}, id), nil
}

func roleNames(rs []Role) string {
	if len(rs) == 0 {
		return "none"
	}
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += string(r)
	}
	return s
}

// roleServerOption is the server's credentials: mutual TLS admitting the roles given (at the
// handshake; the table checks each method), or none (plaintext).
func roleServerOption(sec *security.TLS, admit []Role) []grpc.ServerOption {
	if sec == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(sec.ServerConfig(admit...)))}
}
