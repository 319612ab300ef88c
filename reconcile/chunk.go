package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// ErrReportTooLarge: a TaskManager's report stream passed MaxReportBytes or
// MaxReportExecutions. The leader stops reading it and treats the TM as one that did not
// report (its executions are missing); asking again would only repeat it.
var ErrReportTooLarge = errors.New("reconcile: report too large")

// ErrContradictoryReport: a TaskManager's report says as_expected but lists executions, says it
// before its last chunk, or answers a request that expected nothing. It is refused like a
// report past a bound.
var ErrContradictoryReport = errors.New("reconcile: contradictory report")

// reportStream accumulates one TM's report chunks within the per-stream bounds.
type reportStream struct {
	tmID     string
	maxBytes int64
	maxExecs int
	bytes    int64
	chunks   int
	rep      *Report
	expect   *transport.ReportDigest // what the request expected (nil: nothing)
}

func (s *reportStream) contradiction(chunk *pb.TaskManagerReport) string {
	switch {
	case s.expect == nil:
		return "to a request that expected nothing"
	case !chunk.GetLast():
		return fmt.Sprintf("in chunk %d, which is not the last", chunk.GetChunkIndex())
	}
	return fmt.Sprintf("and lists %d executions", len(s.rep.Executions))
}

// add takes one chunk; it refuses a chunk that would pass either bound, naming the bound.
func (s *reportStream) add(chunk *pb.TaskManagerReport) error {
	s.bytes += int64(proto.Size(chunk))
	s.chunks++
	if s.bytes > s.maxBytes {
		return fmt.Errorf("%w: the report of %s passed MaxReportBytes (%d bytes) at chunk %d: %d bytes so far",
			ErrReportTooLarge, s.tmID, s.maxBytes, chunk.GetChunkIndex(), s.bytes)
	}
	if n := len(s.rep.Executions) + len(chunk.GetExecutions()); n > s.maxExecs {
		return fmt.Errorf("%w: the report of %s passed MaxReportExecutions (%d executions) at chunk %d: %d executions so far",
			ErrReportTooLarge, s.tmID, s.maxExecs, chunk.GetChunkIndex(), n)
	}
	s.rep.Executions = append(s.rep.Executions, chunk.GetExecutions()...)
	if chunk.GetAsExpected() {
		// Only an answer to an expectation, and only with nothing listed: anything else is
		// a TM that contradicts itself, and its report is read as it lists.
		if s.expect == nil || len(s.rep.Executions) != 0 || !chunk.GetLast() {
			return fmt.Errorf("%w: the report of %s says as_expected %s", ErrContradictoryReport, s.tmID, s.contradiction(chunk))
		}
		s.rep.AsExpected, s.rep.Expected = true, int64(s.expect.Count)
	}
	return nil
}

// fetch asks one TM for its report and reads the stream to its last chunk, within the
// stream's deadline (ReportStreamTimeout) and bounds (MaxReportBytes, MaxReportExecutions).
// Chunks are asked for at most ReportChunk executions and ReportChunkBytes bytes each.
func (c *collector) fetch(ctx context.Context, t target) (*Report, error) {
	cfg := c.r.cfg
	s := &reportStream{tmID: t.id, maxBytes: cfg.MaxReportBytes, maxExecs: cfg.MaxReportExecutions, rep: &Report{TMID: t.id, Addr: t.addr}, expect: t.expect}
	leaderID, leaderAddr := c.t.Leader()
	req := &pb.RequestReportRequest{
		Epoch: c.epoch, LeaderId: leaderID, LeaderGrpcAddress: leaderAddr,
		ChunkSize: cfg.ReportChunk, MaxChunkBytes: int64(cfg.ReportChunkBytes),
	}
	if t.expect != nil && !cfg.WholeReports {
		req.Expect = t.expect.Proto()
	} else {
		s.expect = nil
	}
	err := c.t.Stream(ctx, t.addr, cfg.ReportStreamTimeout, func(ctx context.Context, cl pb.TaskManagerServiceClient) error {
		stream, err := cl.RequestReport(ctx, req)
		if err != nil {
			return err
		}
		for {
			chunk, err := stream.Recv()
			if err == io.EOF {
				return errors.New("report stream ended without its last chunk")
			}
			if err != nil {
				return err
			}
			if chunk.TmId != "" && chunk.TmId != t.id {
				return errors.New("report from " + chunk.TmId + " at the address of " + t.id)
			}
			if err := s.add(chunk); err != nil {
				return err
			}
			if chunk.Last {
				return nil
			}
		}
	})
	if err == nil {
		c.r.log.Debug("report received", "epoch", c.epoch, "tm", t.id, "executions", len(s.rep.Executions), "as_expected", s.rep.AsExpected, "chunks", s.chunks, "bytes", s.bytes)
	}
	return s.rep, err
}
