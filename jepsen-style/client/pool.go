// Package client is the client side of a run: gRPC connections to the JobMasters made from
// inside the client namespace, the workload generator that records every operation, the
// monitor that polls cluster status, and the reads of the final phase.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/jepsen-style/history"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// ErrNoJM is returned when the pool has no JobMaster.
var ErrNoJM = errors.New("client: no jobmaster")

// DialFunc creates a connection; netns.Dialer makes it inside a namespace.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// Pool holds one gRPC connection per JobMaster.
type Pool struct {
	nodes []string
	conns map[string]*grpc.ClientConn
}

// NewPool connects (lazily) to every JM; addrs maps node name to gRPC address. dial may be nil.
// With sec the connections are mutual TLS (the JobMasters must present jobmaster
// certificates); nil: plaintext.
func NewPool(addrs map[string]string, dial DialFunc, sec ...*security.TLS) (*Pool, error) {
	p := &Pool{conns: map[string]*grpc.ClientConn{}}
	for node := range addrs {
		p.nodes = append(p.nodes, node)
	}
	sort.Strings(p.nodes)
	if len(p.nodes) == 0 {
		return nil, ErrNoJM
	}
	for _, node := range p.nodes {
		creds := grpc.WithTransportCredentials(insecure.NewCredentials())
		if len(sec) > 0 && sec[0] != nil {
			creds = transport.DialCredentials(sec[0], security.RoleJobMaster)
		}
		opts := append([]grpc.DialOption{creds}, transport.DialOptions(transport.DefaultMaxMessageSize, "jepsen client")...)
		if dial != nil {
			opts = append(opts, grpc.WithContextDialer(dial))
		}
		cc, err := grpc.NewClient("passthrough:///"+addrs[node], opts...)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("client: %s: %w", node, err)
		}
		p.conns[node] = cc
	}
	return p, nil
}

// Nodes lists the JM names, sorted.
func (p *Pool) Nodes() []string { return append([]string(nil), p.nodes...) }

// Client returns the ClientService of a JM.
func (p *Pool) Client(node string) pb.ClientServiceClient {
	return pb.NewClientServiceClient(p.conns[node])
}

// Operator returns the OperatorService of a JM.
func (p *Pool) Operator(node string) pb.OperatorServiceClient {
	return pb.NewOperatorServiceClient(p.conns[node])
}

// Close closes every connection.
func (p *Pool) Close() {
	for _, cc := range p.conns {
		cc.Close()
	}
}

// Classify maps the error of a write to its history type: definite refusals are Fail, every
// error that leaves the outcome open (UNAVAILABLE, deadline, connection loss, internal) is Info.
func Classify(err error) (history.Type, *history.Value) {
	if err == nil {
		return history.OK, nil
	}
	st, _ := status.FromError(err)
	v := &history.Value{Code: st.Code().String(), Reason: transport.Reason(err)}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
		codes.PermissionDenied, codes.Unauthenticated, codes.OutOfRange, codes.Unimplemented:
		return history.Fail, v
	}
	return history.Info, v
}

// ClassifyRead maps the outcome of a read: NOT_FOUND is a successful observation of absence,
// every other error is Info (the read is then ignored by the checkers).
func ClassifyRead(resp *pb.GetJobResponse, err error) (history.Type, *history.Value) {
	if err == nil {
		return history.OK, &history.Value{Found: true, Status: resp.GetJob().GetStatus().String()}
	}
	if status.Code(err) == codes.NotFound {
		return history.OK, &history.Value{Found: false}
	}
	return history.Info, &history.Value{Code: status.Code(err).String(), Reason: transport.Reason(err)}
}
