package transport_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/jmcluster/jmcluster/transport"
	_ "github.com/jmcluster/jmcluster/transport/pb"
)

// TestEveryRowNamesAMethod: a row of the policy table names a method of a service in the
// registered protobuf descriptors, so a renamed or removed method leaves no stale row; a
// forwarding row names a unary method whose reply type the forward helper can build.
func TestEveryRowNamesAMethod(t *testing.T) {
	for name, p := range transport.Policies {
		svc, m, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
		if !ok {
			t.Errorf("%s: not /service/method", name)
			continue
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(m))
		if md == nil {
			t.Errorf("%s: the service has no such method", name)
			continue
		}
		if p.Forward {
			if md.IsStreamingClient() || md.IsStreamingServer() {
				t.Errorf("%s: a forwarding row on a streaming method", name)
			}
			if _, err := transport.NewReply(name); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// probe is a service the table has no row for.
var probe = grpc.ServiceDesc{
	ServiceName: "jmcluster.test.Probe",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Ping",
		Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			req := new(emptypb.Empty)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return new(emptypb.Empty), nil }
			if in == nil {
				return h(ctx, req)
			}
			return in(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/jmcluster.test.Probe/Ping"}, h)
		},
	}},
}

// TestMethodWithoutARowIsFoundAndRefused: a method registered without a policy row is what
// Uncovered reports (and MustCover refuses at start-up); a call that reaches it anyway is
// refused UNIMPLEMENTED naming the table, never served.
func TestMethodWithoutARowIsFoundAndRefused(t *testing.T) {
	s, reg := transport.NewServer(0, "TaskManager", nil, transport.Auth{})
	reg.RegisterService(&probe, struct{}{})
	got := transport.Uncovered(s, false)
	if len(got) != 1 || !strings.HasPrefix(got[0], "/jmcluster.test.Probe/Ping: no policy row") {
		t.Fatalf("Uncovered = %q, want the probe's method", got)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "/jmcluster.test.Probe/Ping") {
				t.Errorf("MustCover recovered %v, want a panic naming the method", r)
			}
		}()
		transport.MustCover(s, false)
	}()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = cc.Invoke(ctx, "/jmcluster.test.Probe/Ping", new(emptypb.Empty), new(emptypb.Empty))
	if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "no policy row") {
		t.Fatalf("call without a row: %v, want UNIMPLEMENTED naming the policy table", err)
	}
}

// TestTaskManagerRowsNeedNoGuard: a server without a guard (a TaskManager's) cannot apply a
// row that needs the leader, forwarding or a write limit; Uncovered says so.
func TestTaskManagerRowsNeedNoGuard(t *testing.T) {
	s, reg := transport.NewServer(0, "TaskManager", nil, transport.Auth{})
	reg.RegisterService(&grpc.ServiceDesc{
		ServiceName: "jmcluster.v1.ClientService", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "SubmitJob", Handler: probe.Methods[0].Handler}},
	}, struct{}{})
	got := transport.Uncovered(s, false)
	if len(got) != 1 || !strings.Contains(got[0], "needs a JobMaster") {
		t.Fatalf("Uncovered = %q, want SubmitJob refused on a server without a guard", got)
	}
	if got := transport.Uncovered(s, true); len(got) != 0 {
		t.Fatalf("with a guard: Uncovered = %q, want nothing", got)
	}
}

// TestEveryRowHasARoleRule: every method of the table names the certificate roles that may call
// it, each a known role; a row without one is reported by Uncovered, so a server that registers
// such a method refuses to start.
func TestEveryRowHasARoleRule(t *testing.T) {
	for name, p := range transport.Policies {
		if len(p.Roles) == 0 {
			t.Errorf("%s: no role rule (Policy.Roles)", name)
		}
		for _, r := range p.Roles {
			if !r.Valid() {
				t.Errorf("%s: unknown role %q", name, r)
			}
		}
	}
	const m = "/jmcluster.test.Probe/Ping"
	transport.Policies[m] = transport.Policy{}
	defer delete(transport.Policies, m)
	s, reg := transport.NewServer(0, "TaskManager", nil, transport.Auth{})
	reg.RegisterService(&probe, struct{}{})
	if got := transport.Uncovered(s, false); len(got) != 1 || !strings.Contains(got[0], "admits no role") {
		t.Fatalf("Uncovered with a row without roles: %v", got)
	}
}

// TestRoleRulesKeepEachRoleToItsPart: the table's promises per role. A TaskManager calls no
// OperatorService method (it cannot join Raft or change it) and none of the JobMasters' calls
// of TaskManagerService; a reader changes nothing; the data plane and the pool's questions are
// between TaskManagers only.
func TestRoleRulesKeepEachRoleToItsPart(t *testing.T) {
	has := func(p transport.Policy, r transport.Role) bool {
		for _, x := range p.Roles {
			if x == r {
				return true
			}
		}
		return false
	}
	writes := map[string]bool{
		"/jmcluster.v1.ClientService/SubmitJob": true, "/jmcluster.v1.ClientService/CancelJob": true,
		"/jmcluster.v1.OperatorService/RaftJoin": true, "/jmcluster.v1.OperatorService/RaftRemove": true,
		"/jmcluster.v1.OperatorService/Snapshot":    true,
		"/jmcluster.v1.ArtifactService/PutArtifact": true, "/jmcluster.v1.ArtifactService/RemoveArtifact": true,
	}
	for name, p := range transport.Policies {
		svc := name[:strings.LastIndex(name, "/")]
		switch {
		case svc == "/jmcluster.v1.OperatorService" && has(p, transport.RoleTaskManager):
			t.Errorf("%s admits TaskManagers", name)
		case svc == "/jmcluster.v1.TaskManagerService" && (len(p.Roles) != 1 || p.Roles[0] != transport.RoleJobMaster):
			t.Errorf("%s admits %v; want the jobmaster role only", name, p.Roles)
		case svc == "/jmcluster.v1.ArtifactService" && has(p, transport.RoleTaskManager) && name != "/jmcluster.v1.ArtifactService/GetArtifact":
			t.Errorf("%s admits TaskManagers; they may only fetch (GetArtifact)", name)
		case (svc == "/jmcluster.v1.DataService" || svc == "/jmcluster.v1.PeerService" || svc == "/jmcluster.v1.JobMasterService") &&
			(len(p.Roles) != 1 || p.Roles[0] != transport.RoleTaskManager):
			t.Errorf("%s admits %v; want the taskmanager role only", name, p.Roles)
		}
		if writes[name] && has(p, transport.RoleReader) {
			t.Errorf("%s admits readers", name)
		}
		if _, ok := transport.Policies[name]; ok && writes[name] && !has(p, transport.RoleOperator) {
			t.Errorf("%s does not admit operators", name)
		}
	}
	for w := range writes {
		if _, ok := transport.Policies[w]; !ok {
			t.Errorf("%s: no row (renamed?)", w)
		}
	}
}
