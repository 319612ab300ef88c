package transport

import (
	"context"
	"slices"
	"strings"

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
	callerNameKey  = "x-jmcluster-caller"
	callerRoleKey  = "x-jmcluster-caller-role"
	callerTokenKey = "x-jmcluster-caller-token"
)

// ForwardFor adds the caller of ctx (as Caller finds it) to the outgoing metadata of a call
// forwarded on its behalf.
func ForwardFor(in, out context.Context) context.Context {
	id, ok := Caller(in)
	if !ok {
		return out
	}
	out = metadata.AppendToOutgoingContext(out, callerNameKey, id.Name, callerRoleKey, string(id.Role))
	if id.Token {
		out = metadata.AppendToOutgoingContext(out, callerTokenKey, "true")
	}
	return out
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
		return security.Identity{Name: names[0], Role: security.Role(roles[0]), Via: id.Name, Token: len(md.Get(callerTokenKey)) > 0}, true
	}
	return id, true
}

// Auth is how a server authenticates its callers (NewServer).
type Auth struct {
	// TLS: mutual TLS with this certificate and CA; nil: plaintext, and nothing is checked.
	TLS *security.TLS
	// Admit: the certificate roles admitted at the handshake (nil: any role); the table
	// checks each method.
	Admit []Role
	// Tokens: bearer tokens accepted too, from clients without a certificate (the JobMaster's
	// gRPC server, --token-file); nil: certificates only.
	Tokens *security.Tokens
}

func (a Auth) serverOptions() []grpc.ServerOption {
	switch {
	case a.TLS == nil:
		return nil
	case a.Tokens != nil:
		return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(a.TLS.ServerConfigOptionalClient(a.Admit...)))}
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(a.TLS.ServerConfig(a.Admit...)))}
}

// authorize refuses PERMISSION_DENIED a caller whose role the method's row does not admit, and
// UNAUTHENTICATED one without a certificate or a known bearer token. On a plaintext server (no
// identity) every call is admitted: the plaintext mode's risk.
func (a Auth) authorize(ctx context.Context, method string, p Policy) (context.Context, error) {
	if a.TLS == nil {
		return ctx, nil
	}
	id, ok := callerOf(ctx)
	if !ok && a.Tokens != nil {
		secret, found := bearer(ctx)
		if !found {
			return ctx, status.Errorf(codes.Unauthenticated, "%s: present a client certificate or a bearer token", method)
		}
		var err error
		if id, err = a.Tokens.Lookup(secret); err != nil {
			return ctx, status.Errorf(codes.Unauthenticated, "%s: %v", method, err)
		}
		ok = true
	}
	if !ok {
		return ctx, status.Errorf(codes.Unauthenticated, "%s: the call carries no verified certificate", method)
	}
	if !slices.Contains(p.Roles, id.Role) {
		return ctx, status.Errorf(codes.PermissionDenied, "%s may not call %s (roles admitted: %s)", id, method, roleNames(p.Roles))
	}
	return context.WithValue(ctx, callerKey{}, id), nil
}

// bearer is the secret of the call's "authorization: Bearer SECRET" metadata.
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if s, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(s), true
		}
	}
	return "", false
}

// TokenCredentials send secret as a bearer token with every call (over TLS only).
func TokenCredentials(secret string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearerCreds(secret))
}

type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerCreds) RequireTransportSecurity() bool { return true }

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
