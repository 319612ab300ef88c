package jmserver

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/metadata"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// ArtifactService implements pb.ArtifactServiceServer (docs/user-functions.md, "Artifacts").
// PutArtifact is a client stream, which the edge does not forward: its row is Local, and the
// handler serves it on the established leader and relays the stream to the leader elsewhere
// (once: a relayed stream carries the forwarded mark). RemoveArtifact and a consistent
// ListArtifacts are forwarded by the edge; GetArtifact is served from this replica's state.
type ArtifactService struct {
	pb.UnimplementedArtifactServiceServer
	d Deps
}

// NewArtifactService returns the ArtifactService of a JobMaster replica.
func NewArtifactService(d Deps) *ArtifactService { return &ArtifactService{d: d} }

// PutArtifact stores an artifact; the first message declares it, the others carry its bytes.
func (s *ArtifactService) PutArtifact(stream pb.ArtifactService_PutArtifactServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: PutArtifact: no message (the first declares sha256 and size)", jobmaster.ErrInvalidRequest)
	}
	if err != nil {
		return err
	}
	if len(first.Data) > 0 || first.Sha256 == "" {
		return fmt.Errorf("%w: PutArtifact: the first message declares sha256 and size and carries no data", jobmaster.ErrInvalidRequest)
	}
	if jm := s.d.JM; jm != nil && jm.Active() {
		next := func() ([]byte, error) {
			m, err := stream.Recv()
			if err != nil {
				return nil, err
			}
			if m.Sha256 != "" || m.Size != 0 {
				return nil, fmt.Errorf("%w: PutArtifact: sha256 and size belong to the first message only", jobmaster.ErrInvalidRequest)
			}
			return m.Data, nil
		}
		resp, err := jm.PutArtifact(ctx, first.Sha256, first.Size, next)
		s.d.audit(ctx, "put artifact", err, "sha256", first.Sha256, "size", first.Size)
		if err != nil {
			return err
		}
		return stream.SendAndClose(resp)
	}
	return s.relay(stream, first)
}

// relay sends a PutArtifact stream on to the leader and its answer back.
func (s *ArtifactService) relay(stream pb.ArtifactService_PutArtifactServer, first *pb.PutArtifactRequest) error {
	ctx := stream.Context()
	if isForwarded(ctx) || s.d.Node == nil {
		return jobmaster.ErrNotLeader
	}
	conn, leader, err := s.d.Node.LeaderConn(ctx)
	if err != nil {
		return err
	}
	if leader == s.d.Node.ID() {
		return cluster.ErrNotEstablished // the leader, not established yet: the caller retries
	}
	octx := metadata.AppendToOutgoingContext(transport.ForwardFor(ctx, ctx), forwardedKey, s.d.Node.ID())
	up, err := pb.NewArtifactServiceClient(conn).PutArtifact(octx)
	if err != nil {
		return err
	}
	msg := first
	for {
		if err := up.Send(msg); err != nil {
			if errors.Is(err, io.EOF) {
				break // the leader answered (an error, or the artifact existed): CloseAndRecv has it
			}
			return err
		}
		msg, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	resp, err := up.CloseAndRecv()
	if err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}

// ListArtifacts lists the stored artifacts with the jobs that use them.
func (s *ArtifactService) ListArtifacts(ctx context.Context, req *pb.ListArtifactsRequest) (*pb.ListArtifactsResponse, error) {
	list, uploads := s.d.State.Artifacts()
	out := &pb.ListArtifactsResponse{Uploads: int32(uploads)}
	for _, a := range list {
		out.Artifacts = append(out.Artifacts, &pb.ArtifactSummary{Sha256: a.SHA256, Size: a.Size, StoredAt: a.StoredAt,
			StoredIndex: a.StoredIndex, Jobs: a.Jobs, ActiveJobs: a.ActiveJobs})
		out.TotalBytes += a.Size
	}
	if jm := s.d.JM; jm != nil {
		l := jm.ArtifactLimits()
		out.MaxBytes, out.MaxTotalBytes, out.MaxArtifacts = l.MaxBytes, l.MaxTotalBytes, l.MaxArtifacts
	}
	return out, nil
}

// RemoveArtifact removes a stored artifact no job that is not terminal uses.
func (s *ArtifactService) RemoveArtifact(ctx context.Context, req *pb.RemoveArtifactRequest) (*pb.RemoveArtifactResponse, error) {
	index, err := s.d.JM.RemoveArtifact(ctx, req.Sha256)
	s.d.audit(ctx, "remove artifact", err, "sha256", req.Sha256)
	if err != nil {
		return nil, err
	}
	return &pb.RemoveArtifactResponse{Index: index}, nil
}

// GetArtifact streams a stored artifact from this replica's state, a chunk per message.
func (s *ArtifactService) GetArtifact(req *pb.GetArtifactRequest, stream pb.ArtifactService_GetArtifactServer) error {
	if !fsm.ValidSHA256(req.Sha256) {
		return fmt.Errorf("%w: sha256 %q: must be 64 lower-case hex characters", jobmaster.ErrInvalidRequest, req.Sha256)
	}
	info, chunks, ok := s.d.State.Artifact(req.Sha256)
	if !ok {
		return fmt.Errorf("%w: %s is not stored on %s (yet)", fsm.ErrUnknownArtifact, req.Sha256, s.nodeID())
	}
	for i, c := range chunks {
		m := &pb.GetArtifactResponse{Data: c}
		if i == 0 {
			m.Sha256, m.Size = info.SHA256, info.Size
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

func (s *ArtifactService) nodeID() string {
	if s.d.Node == nil {
		return "this JobMaster"
	}
	return "JobMaster " + s.d.Node.ID()
}
