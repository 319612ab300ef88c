package jmserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// KeyringCallTimeout bounds each member's part of a keyring fan-out.
const KeyringCallTimeout = 5 * time.Second

// GossipService implements pb.GossipServiceServer on every JobMaster and TaskManager: the
// keyring of the node it runs on. gossip returns the node's membership (nil while gossip is
// off or not yet started: the call is refused UNAVAILABLE).
type GossipService struct {
	pb.UnimplementedGossipServiceServer
	gossip func() *membership.Membership
	audit  func(ctx context.Context, action string, err error, kv ...any)
}

// NewGossipService returns the keyring service of the node whose membership gossip returns;
// audit (nil: none) receives a line for every change.
func NewGossipService(gossip func() *membership.Membership, audit func(ctx context.Context, action string, err error, kv ...any)) *GossipService {
	return &GossipService{gossip: gossip, audit: audit}
}

// Keyring lists or changes this node's keyring.
func (s *GossipService) Keyring(ctx context.Context, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	m := s.gossip()
	if m == nil {
		return nil, status.Error(codes.Unavailable, "gossip is off on this node")
	}
	resp, err := localKeyring(m, req)
	if req.GetOp() != pb.KeyringOp_KEYRING_OP_LIST && s.audit != nil {
		s.audit(ctx, "gossip keyring "+opName(req.GetOp()), err, "key", membership.KeyFingerprint(req.GetKey()))
	}
	return resp, err
}

// localKeyring does req on m and returns m's keyring after it, or a status error.
func localKeyring(m *membership.Membership, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	var err error
	switch req.GetOp() {
	case pb.KeyringOp_KEYRING_OP_LIST:
	case pb.KeyringOp_KEYRING_OP_INSTALL:
		err = m.InstallKey(req.GetKey())
	case pb.KeyringOp_KEYRING_OP_USE:
		err = m.UseKey(req.GetKey())
	case pb.KeyringOp_KEYRING_OP_REMOVE:
		err = m.RemoveKey(req.GetKey())
	default:
		return nil, status.Errorf(codes.InvalidArgument, "keyring op %s: want list, install, use or remove", req.GetOp())
	}
	if err != nil {
		return nil, keyringStatus(err)
	}
	st, err := m.Keyring()
	if err != nil {
		return nil, keyringStatus(err)
	}
	primary, keys := st.Fingerprints()
	return &pb.KeyringResponse{Node: m.Name(), Primary: primary, Keys: keys}, nil
}

func keyringStatus(err error) error {
	switch {
	case errors.Is(err, membership.ErrBadKey):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, membership.ErrNotEncrypted), errors.Is(err, membership.ErrKeyNotInstalled), errors.Is(err, membership.ErrRemovePrimary):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func opName(op pb.KeyringOp) string {
	return strings.ToLower(strings.TrimPrefix(op.String(), "KEYRING_OP_"))
}

// keyringFanout does req on every live member of the pool m sees: itself directly, the others
// through their GossipService (dialled with sec, each call bounded by KeyringCallTimeout).
// Use is refused, and nothing changed, while a live member lacks the key or cannot be asked;
// remove while a live member still encrypts with the key: either would leave members unable to
// read each other's gossip, which is what marks members dead.
func keyringFanout(ctx context.Context, m *membership.Membership, sec *security.TLS, req *pb.KeyringRequest) (*pb.GossipKeyringResponse, error) {
	if !m.Encrypted() {
		return nil, keyringStatus(membership.ErrNotEncrypted)
	}
	if req.GetOp() == pb.KeyringOp_KEYRING_OP_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "keyring op is required: list, install, use or remove")
	}
	if req.GetOp() != pb.KeyringOp_KEYRING_OP_LIST {
		if err := membership.ValidateKey(req.GetKey()); err != nil {
			return nil, keyringStatus(err)
		}
	}
	members := liveMembers(m)
	if op := req.GetOp(); op == pb.KeyringOp_KEYRING_OP_USE || op == pb.KeyringOp_KEYRING_OP_REMOVE {
		listed := fanout(ctx, m, sec, members, &pb.KeyringRequest{Op: pb.KeyringOp_KEYRING_OP_LIST})
		if err := checkRotationStep(op, membership.KeyFingerprint(req.GetKey()), listed); err != nil {
			return nil, err
		}
	}
	return fanout(ctx, m, sec, members, req), nil
}

// checkRotationStep refuses a use or remove that the members' keyrings (listed) say would
// break gossip.
func checkRotationStep(op pb.KeyringOp, key string, listed *pb.GossipKeyringResponse) error {
	var unasked, blocking []string
	for _, mk := range listed.Members {
		switch {
		case mk.Error != "":
			unasked = append(unasked, mk.Name+" ("+mk.Error+")")
		case op == pb.KeyringOp_KEYRING_OP_USE && !slices.Contains(mk.Keys, key):
			blocking = append(blocking, mk.Name)
		case op == pb.KeyringOp_KEYRING_OP_REMOVE && mk.Primary == key:
			blocking = append(blocking, mk.Name)
		}
	}
	if len(unasked) > 0 {
		return status.Errorf(codes.Unavailable, "%s refused, nothing changed: these members could not be asked for their keyring, and a member left behind would stop reading gossip: %s",
			opName(op), strings.Join(unasked, "; "))
	}
	if len(blocking) == 0 {
		return nil
	}
	if op == pb.KeyringOp_KEYRING_OP_USE {
		return status.Errorf(codes.FailedPrecondition, "use refused, nothing changed: key %s is not installed on %s (run install first)", key, strings.Join(blocking, ", "))
	}
	return status.Errorf(codes.FailedPrecondition, "remove refused, nothing changed: key %s is still the primary on %s (run use with the new key first)", key, strings.Join(blocking, ", "))
}

type poolMember struct {
	name, role, grpc string
	self             bool
}

func liveMembers(m *membership.Membership) []poolMember {
	var out []poolMember
	for _, mb := range m.Members() {
		if !mb.Live() {
			continue
		}
		out = append(out, poolMember{name: mb.Name, role: string(mb.Meta.Role), grpc: mb.Meta.GRPCAddr, self: mb.Name == m.Name()})
	}
	return out
}

// fanout does req on each member at once and returns their answers by name.
func fanout(ctx context.Context, m *membership.Membership, sec *security.TLS, members []poolMember, req *pb.KeyringRequest) *pb.GossipKeyringResponse {
	out := &pb.GossipKeyringResponse{Members: make([]*pb.MemberKeyring, len(members))}
	var wg sync.WaitGroup
	for i, pm := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mk := &pb.MemberKeyring{Name: pm.name, Role: pm.role}
			resp, err := askMember(ctx, m, sec, pm, req)
			if err != nil {
				mk.Error = status.Convert(err).Message()
			} else {
				mk.Primary, mk.Keys = resp.Primary, resp.Keys
			}
			out.Members[i] = mk
		}()
	}
	wg.Wait()
	for _, mk := range out.Members {
		if mk.Error != "" {
			out.Failed++
		}
	}
	return out
}

func askMember(ctx context.Context, m *membership.Membership, sec *security.TLS, pm poolMember, req *pb.KeyringRequest) (*pb.KeyringResponse, error) {
	if pm.self {
		return localKeyring(m, req)
	}
	if pm.grpc == "" {
		return nil, errors.New("no gRPC address in its gossip metadata")
	}
	want := security.RoleTaskManager
	if pm.role == string(membership.RoleJobMaster) {
		want = security.RoleJobMaster
	}
	cc, err := grpc.NewClient(pm.grpc, append([]grpc.DialOption{transport.DialCredentials(sec, want)},
		transport.DialOptions(0, "JobMaster (keyring fan-out)")...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", pm.grpc, err)
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(transport.ForwardFor(ctx, ctx), KeyringCallTimeout)
	defer cancel()
	return pb.NewGossipServiceClient(cc).Keyring(cctx, req)
}
