package agent_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/agent"
	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/testkit/tlstest"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// rpc makes one call on a new connection to addr with sec's certificate (nil: plaintext) and
// returns its status code and message.
func rpc(t *testing.T, sec *security.TLS, addr string, call func(context.Context, *grpc.ClientConn) error) (codes.Code, string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, transport.DialCredentials(sec))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := status.Convert(call(ctx, cc))
	return st.Code(), st.Message()
}

func expect(t *testing.T, what string, code codes.Code, msg string, want codes.Code, wantMsg string) {
	t.Helper()
	if code != want || !strings.Contains(msg, wantMsg) {
		t.Errorf("%s: %s %q; want %s containing %q", what, code, msg, want, wantMsg)
	}
}

// TestMutualTLSClusterChecksEveryRole: a cluster with mutual TLS on every connection elects a
// leader over the TLS Raft transport, its TaskManagers register and run a job (JM -> TM, TM ->
// JM and TM <-> TM over TLS), a job submitted to a follower with an operator certificate is
// forwarded (checked against the operator's role on the leader); and each role is held to its
// rows of the policy table, on the JobMasters and on the TaskManagers, while a plaintext
// client and certificates of another CA or expired ones are refused on every port.
func TestMutualTLSClusterChecksEveryRole(t *testing.T) {
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2, Slots: 2, TLS: ca})
	id := c.Submit(testcluster.StreamingChain("tls", 2, 20, 0))
	testcluster.WaitFor(t, 20*time.Second, "the job running over TLS", func() (bool, string) {
		rec := c.Job(id)
		return testcluster.AllRunning(rec), testcluster.Describe(rec)
	})
	leader, follower := c.Leader(), c.Follower()
	tm := c.TMs[0].A.TM

	reader := ca.TLS(t, security.RoleReader, "rita")
	operator := ca.TLS(t, security.RoleOperator, "olga")
	tmCert := ca.TLS(t, security.RoleTaskManager, "tm-rogue")
	jmCert := ca.TLS(t, security.RoleJobMaster, "jm-rogue")
	otherCA := other.TLS(t, security.RoleOperator, "mallory")
	expired := ca.TLS(t, security.RoleOperator, "old", tlstest.Expired())
	otherTM := other.TLS(t, security.RoleTaskManager, "tm-other")
	expiredTM := ca.TLS(t, security.RoleTaskManager, "tm-old", tlstest.Expired())

	submit := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewClientServiceClient(cc).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: testcluster.StreamingChain("x", 1, 1, 1)})
		return err
	}
	cancelJob := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewClientServiceClient(cc).CancelJob(ctx, &pb.CancelJobRequest{JobId: id})
		return err
	}
	list := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewClientServiceClient(cc).ListJobs(ctx, &pb.ListJobsRequest{})
		return err
	}
	peers := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewOperatorServiceClient(cc).RaftPeers(ctx, &pb.RaftPeersRequest{})
		return err
	}
	join := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewOperatorServiceClient(cc).RaftJoin(ctx, &pb.RaftJoinRequest{Id: "rogue", RaftAddress: "127.0.0.1:1", GrpcAddress: "127.0.0.1:2"})
		return err
	}
	heartbeat := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewJobMasterServiceClient(cc).Heartbeat(ctx, &pb.HeartbeatRequest{TmId: "tm-rogue"})
		return err
	}
	clusterStatus := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewClientServiceClient(cc).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		return err
	}

	for _, j := range []*testcluster.JM{leader, follower} {
		addr := j.GRPCAddr + " (" + j.ID + ")"
		// A reader reads and cannot write.
		code, msg := rpc(t, reader, j.GRPCAddr, list)
		expect(t, "reader ListJobs at "+addr, code, msg, codes.OK, "")
		code, msg = rpc(t, reader, j.GRPCAddr, submit)
		expect(t, "reader SubmitJob at "+addr, code, msg, codes.PermissionDenied, "rita (reader) may not call /jmcluster.v1.ClientService/SubmitJob")
		code, msg = rpc(t, reader, j.GRPCAddr, cancelJob)
		expect(t, "reader CancelJob at "+addr, code, msg, codes.PermissionDenied, "may not call")
		code, msg = rpc(t, reader, j.GRPCAddr, join)
		expect(t, "reader RaftJoin at "+addr, code, msg, codes.PermissionDenied, "may not call")
		// A TaskManager certificate: ClusterStatus yes, OperatorService no.
		code, msg = rpc(t, tmCert, j.GRPCAddr, clusterStatus)
		expect(t, "taskmanager ClusterStatus at "+addr, code, msg, codes.OK, "")
		code, msg = rpc(t, tmCert, j.GRPCAddr, peers)
		expect(t, "taskmanager RaftPeers at "+addr, code, msg, codes.PermissionDenied, "tm-rogue (taskmanager) may not call /jmcluster.v1.OperatorService/RaftPeers")
		code, msg = rpc(t, tmCert, j.GRPCAddr, join)
		expect(t, "taskmanager RaftJoin at "+addr, code, msg, codes.PermissionDenied, "may not call")
		code, msg = rpc(t, tmCert, j.GRPCAddr, submit)
		expect(t, "taskmanager SubmitJob at "+addr, code, msg, codes.PermissionDenied, "may not call")
		// A JobMaster certificate submits nothing on its own (forwarded calls carry their caller).
		code, msg = rpc(t, jmCert, j.GRPCAddr, submit)
		expect(t, "jobmaster SubmitJob at "+addr, code, msg, codes.PermissionDenied, "jm-rogue (jobmaster) may not call")
		// An operator may not pose as a TaskManager.
		code, msg = rpc(t, operator, j.GRPCAddr, heartbeat)
		expect(t, "operator Heartbeat at "+addr, code, msg, codes.PermissionDenied, "may not call /jmcluster.v1.JobMasterService/Heartbeat")
		// Refused at the handshake: plaintext, another CA, expired (client gRPC and TM -> JM).
		for _, bad := range []struct {
			name string
			sec  *security.TLS
			call func(context.Context, *grpc.ClientConn) error
		}{{"plaintext", nil, list}, {"other CA", otherCA, list}, {"expired", expired, list},
			{"TaskManager of another CA", otherTM, heartbeat}, {"expired TaskManager", expiredTM, heartbeat}} {
			code, msg = rpc(t, bad.sec, j.GRPCAddr, bad.call)
			expect(t, bad.name+" at "+addr, code, msg, codes.Unavailable, "")
		}
	}

	// The operator's submit through a follower was forwarded and ran; a reader's through the
	// follower is refused there, before forwarding.
	code, msg := rpc(t, operator, follower.GRPCAddr, cancelJob)
	expect(t, "operator CancelJob at the follower", code, msg, codes.OK, "")
	// The leader's audit lines name the callers the followers forwarded for.
	waitForLog(t, c, `audit: submit job: caller="test-operator (operator) via jm`)
	waitForLog(t, c, `audit: cancel job: caller="olga (operator) via `+follower.ID+`" job=`+id)

	// The TaskManager's servers: TaskManagerService is the JobMasters' only.
	cancelTask := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewTaskManagerServiceClient(cc).CancelTask(ctx, &pb.CancelTaskRequest{AttemptId: "a"})
		return err
	}
	read := func(ctx context.Context, cc *grpc.ClientConn) error {
		s, err := pb.NewDataServiceClient(cc).ReadPartition(ctx, &pb.ReadPartitionRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	code, msg = rpc(t, tmCert, tm.GRPCAddr(), cancelTask)
	expect(t, "taskmanager CancelTask on a TaskManager", code, msg, codes.PermissionDenied, "may not call /jmcluster.v1.TaskManagerService/CancelTask")
	code, msg = rpc(t, operator, tm.GRPCAddr(), cancelTask)
	expect(t, "operator on a TaskManager's gRPC port", code, msg, codes.Unavailable, "")
	code, msg = rpc(t, expired, tm.GRPCAddr(), cancelTask)
	expect(t, "expired certificate on a TaskManager's gRPC port", code, msg, codes.Unavailable, "")
	code, msg = rpc(t, other.TLS(t, security.RoleJobMaster, "jm-other"), tm.GRPCAddr(), cancelTask)
	expect(t, "a JobMaster of another CA on a TaskManager's gRPC port", code, msg, codes.Unavailable, "")
	code, msg = rpc(t, ca.TLS(t, security.RoleJobMaster, "jm-old", tlstest.Expired()), tm.GRPCAddr(), cancelTask)
	expect(t, "an expired JobMaster certificate on a TaskManager's gRPC port", code, msg, codes.Unavailable, "")
	// The data plane admits TaskManagers of the CA only.
	code, msg = rpc(t, tmCert, tm.DataAddr(), read)
	if code == codes.Unavailable || code == codes.PermissionDenied || code == codes.Unauthenticated {
		t.Errorf("a TaskManager certificate on the data plane: %s %q; want the handler's answer", code, msg)
	}
	for _, bad := range []struct {
		name string
		sec  *security.TLS
	}{{"plaintext", nil}, {"a JobMaster certificate", jmCert}, {"a TaskManager of another CA", otherTM}, {"an expired TaskManager", expiredTM}} {
		code, msg = rpc(t, bad.sec, tm.DataAddr(), read)
		expect(t, bad.name+" on the data plane", code, msg, codes.Unavailable, "")
	}
}

// TestOnlyJobMasterCertificatesJoinRaft: a plaintext node, a node with a certificate of
// another CA, a node with a TaskManager certificate and one with an expired JobMaster
// certificate each fail to join a cluster with mutual
// TLS: their join requests are refused over gRPC, and when an operator adds one anyway, the
// leader's Raft transport refuses it (and it refuses the leader): it never receives an entry.
func TestOnlyJobMasterCertificatesJoinRaft(t *testing.T) {
	ca, other := tlstest.NewCA(t), tlstest.NewCA(t)
	c := testcluster.New(t, testcluster.Options{JMs: 3, TLS: ca, NoGossip: true})
	operator := ca.TLS(t, security.RoleOperator, "olga")
	for i, rogue := range []struct {
		name string
		sec  *security.TLS
		code codes.Code
	}{
		{"plaintext", nil, codes.Unavailable},
		{"another CA", other.TLS(t, security.RoleJobMaster, "jm-other"), codes.Unavailable},
		{"a TaskManager certificate", ca.TLS(t, security.RoleTaskManager, "jm-tm"), codes.PermissionDenied},
		{"an expired JobMaster certificate", ca.TLS(t, security.RoleJobMaster, "jm-old", tlstest.Expired()), codes.Unavailable},
	} {
		leader := c.Leader()
		ports := testcluster.FreePorts(t, 2)
		ccfg := cluster.TestConfig()
		ccfg.ID, ccfg.DataDir, ccfg.RaftBindAddr = fmt.Sprintf("rogue%d", i), filepath.Join(t.TempDir(), "rogue"), ports[0]
		ccfg.Join = []string{leader.GRPCAddr}
		a, err := agent.StartJobMaster(agent.JobMasterConfig{Cluster: ccfg, GRPCAddr: ports[1], TLS: rogue.sec, Logger: c.Log.Named(ccfg.ID)})
		if err != nil {
			t.Fatalf("%s: %v", rogue.name, err)
		}
		t.Cleanup(a.Kill)

		// Its own join request, as it would send it.
		code, msg := rpc(t, rogue.sec, leader.GRPCAddr, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewOperatorServiceClient(cc).RaftJoin(ctx, &pb.RaftJoinRequest{Id: ccfg.ID, RaftAddress: a.Node.RaftAddr(), GrpcAddress: a.GRPCAddr()})
			return err
		})
		expect(t, rogue.name+": RaftJoin", code, msg, rogue.code, "")

		// An operator adds it anyway: the configuration names it, but Raft over TLS refuses it.
		before := leader.A.Node.CommitIndex()
		code, msg = rpc(t, operator, leader.GRPCAddr, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewOperatorServiceClient(cc).RaftJoin(ctx, &pb.RaftJoinRequest{Id: ccfg.ID, RaftAddress: a.Node.RaftAddr(), GrpcAddress: a.GRPCAddr()})
			return err
		})
		expect(t, rogue.name+": the operator's RaftJoin", code, msg, codes.OK, "")
		c.Submit(testcluster.StreamingChain(fmt.Sprintf("after-%d", i), 1, 1, 1))
		logFile := c.LogPath()
		testcluster.WaitFor(t, 20*time.Second, rogue.name+": the leader failing to replicate to the rogue", func() (bool, string) {
			b, _ := os.ReadFile(logFile)
			n := 0
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, a.Node.RaftAddr()) && (strings.Contains(line, "failed to") || strings.Contains(line, "refused a TLS peer")) {
					n++
				}
			}
			return n >= 3 && leader.A.Node.CommitIndex() > before, fmt.Sprintf("%d failures logged naming %s; leader commit %d (was %d)", n, a.Node.RaftAddr(), leader.A.Node.CommitIndex(), before)
		})
		if got := a.Node.AppliedIndex(); got != 0 {
			t.Errorf("%s: the rogue applied index %d; want 0 (no entry reached it)", rogue.name, got)
		}
		if got := a.Node.CommitIndex(); got != 0 {
			t.Errorf("%s: the rogue's commit index %d; want 0", rogue.name, got)
		}
		code, msg = rpc(t, operator, leader.GRPCAddr, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewOperatorServiceClient(cc).RaftRemove(ctx, &pb.RaftRemoveRequest{Id: ccfg.ID})
			return err
		})
		expect(t, rogue.name+": RaftRemove", code, msg, codes.OK, "")
		waitForLog(t, c, `audit: raft join: caller="olga (operator)" server=`+ccfg.ID)
		waitForLog(t, c, `audit: raft remove: caller="olga (operator)" server=`+ccfg.ID)
		a.Kill()
	}
}

// TestReplacedCertificateIsUsedByNewConnections: a JobMaster's certificate replaced on disk is
// presented by the next connection, without a restart.
func TestReplacedCertificateIsUsedByNewConnections(t *testing.T) {
	ca := tlstest.NewCA(t)
	c := testcluster.New(t, testcluster.Options{JMs: 1, TLS: ca, NoGossip: true})
	j := c.Leader()
	files := j.A.TLS().Files()
	seen := func() string {
		cfg := ca.TLS(t, security.RoleReader, "rita").ClientConfig(security.RoleJobMaster)
		var name string
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tlsState) error {
			name = cs.PeerCertificates[0].Subject.CommonName
			return verify(cs)
		}
		code, msg := rpcWith(t, cfg, j.GRPCAddr)
		if code != codes.OK {
			t.Fatalf("ClusterStatus: %s %q", code, msg)
		}
		return name
	}
	if got := seen(); got != j.ID {
		t.Fatalf("before: the server presents %q; want %q", got, j.ID)
	}
	ca.Write(t, files, security.RoleJobMaster, j.ID+"-rotated")
	if got := seen(); got != j.ID+"-rotated" {
		t.Fatalf("after replacing the files: the server presents %q; want %q", got, j.ID+"-rotated")
	}
	// The operator connection the cluster made before the change still works, and new ones
	// of the test's operator certificate are accepted by the rotated server.
	if _, err := c.Client(j).ListJobs(context.Background(), &pb.ListJobsRequest{}); err != nil {
		t.Fatalf("ListJobs after the rotation: %v", err)
	}
}

type tlsState = tls.ConnectionState

func rpcWith(t *testing.T, cfg *tls.Config, addr string) (codes.Code, string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewClientServiceClient(cc).ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	st := status.Convert(err)
	return st.Code(), st.Message()
}

// waitForLog waits until the cluster log has a line containing want.
func waitForLog(t *testing.T, c *testcluster.Cluster, want string) {
	t.Helper()
	testcluster.WaitFor(t, 10*time.Second, "a log line containing "+want, func() (bool, string) {
		b, _ := os.ReadFile(c.LogPath())
		var audit []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, want) {
				return true, ""
			}
			if strings.Contains(line, "audit:") {
				audit = append(audit, line)
			}
		}
		return false, "audit lines: " + strings.Join(audit, "\n")
	})
}

// TestBearerTokens: with a token file, a client without a certificate reaches the JobMaster's
// gRPC server over TLS with a reader or operator token and is held to that role; an unknown
// token or none is refused. HTTP is HTTPS: /healthz and /readyz stay open, /metrics is open
// unless --http-metrics-auth, the API needs a token (bearer or basic) or a client certificate
// of the operator or reader role.
func TestBearerTokens(t *testing.T) {
	ca := tlstest.NewCA(t)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	const readerSecret, opSecret = "reader-secret-0123456789", "operator-secret-0123456789"
	if err := os.WriteFile(tokenFile, []byte("dash reader "+readerSecret+"\nops operator "+opSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := security.LoadTokens(tokenFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, testcluster.Options{JMs: 3, TLS: ca, NoGossip: true, JM: func(cfg *agent.JobMasterConfig) {
		cfg.Tokens, cfg.HTTPAddr = tokens, "127.0.0.1:0"
		cfg.MetricsAuth = cfg.Cluster.ID == "jm1"
	}})
	follower := c.Follower()
	caOnly := tlstest.Load(t, security.Files{CA: ca.File})
	withToken := func(secret string, call func(context.Context, *grpc.ClientConn) error) (codes.Code, string) {
		opts := []grpc.DialOption{transport.DialCredentials(caOnly, security.RoleJobMaster)}
		if secret != "" {
			opts = append(opts, transport.TokenCredentials(secret))
		}
		cc, err := grpc.NewClient(follower.GRPCAddr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st := status.Convert(call(ctx, cc))
		return st.Code(), st.Message()
	}
	list := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewClientServiceClient(cc).ListJobs(ctx, &pb.ListJobsRequest{})
		return err
	}
	submit := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := pb.NewClientServiceClient(cc).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: testcluster.StreamingChain("by-token", 1, 1, 1)})
		return err
	}
	code, msg := withToken(readerSecret, list)
	expect(t, "reader token ListJobs", code, msg, codes.OK, "")
	code, msg = withToken(readerSecret, submit)
	expect(t, "reader token SubmitJob", code, msg, codes.PermissionDenied, "dash (reader token) may not call /jmcluster.v1.ClientService/SubmitJob")
	code, msg = withToken(opSecret, submit)
	expect(t, "operator token SubmitJob through a follower", code, msg, codes.OK, "")
	waitForLog(t, c, `audit: submit job: caller="ops (operator token) via `+follower.ID+`"`)
	code, msg = withToken("not-a-token-0123456789", list)
	expect(t, "unknown token", code, msg, codes.Unauthenticated, "unknown bearer token")
	code, msg = withToken("", list)
	expect(t, "no token, no certificate", code, msg, codes.Unauthenticated, "present a client certificate or a bearer token")

	// HTTPS.
	get := func(j *testcluster.JM, path string, sec *security.TLS, auth func(*http.Request)) int {
		cfg := caOnly.ClientConfig(security.RoleJobMaster)
		if sec != nil {
			cfg = sec.ClientConfig(security.RoleJobMaster)
		}
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		defer cl.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+j.A.HTTPAddr()+path, nil)
		if auth != nil {
			auth(req)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bearerAuth := func(s string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+s) }
	}
	jm1, jm2 := c.JMs[0], c.JMs[1]
	for _, x := range []struct {
		what string
		j    *testcluster.JM
		path string
		sec  *security.TLS
		auth func(*http.Request)
		want int
	}{
		{"healthz, no credentials", jm1, "/healthz", nil, nil, 200},
		{"readyz, no credentials", jm1, "/readyz", nil, nil, 200},
		{"metrics on a JM without --http-metrics-auth", jm2, "/metrics", nil, nil, 200},
		{"metrics on a JM with --http-metrics-auth", jm1, "/metrics", nil, nil, 401},
		{"metrics with a reader token", jm1, "/metrics", nil, bearerAuth(readerSecret), 200},
		{"the API, no credentials", jm2, "/api/v1/jobs", nil, nil, 401},
		{"the API, an unknown token", jm2, "/api/v1/jobs", nil, bearerAuth("not-a-token-0123456789"), 401},
		{"the API, a reader token", jm2, "/api/v1/jobs", nil, bearerAuth(readerSecret), 200},
		{"the UI, a token as the basic password", jm2, "/", nil, func(r *http.Request) { r.SetBasicAuth("dash", readerSecret) }, 200},
		{"the API, a reader certificate", jm2, "/api/v1/cluster", ca.TLS(t, security.RoleReader, "rita"), nil, 200},
		{"the API, a TaskManager certificate", jm2, "/api/v1/cluster", ca.TLS(t, security.RoleTaskManager, "tm9"), nil, 403},
	} {
		if got := get(x.j, x.path, x.sec, x.auth); got != x.want {
			t.Errorf("%s: GET %s on %s: %d; want %d", x.what, x.path, x.j.ID, got, x.want)
		}
	}
}
