package transport

import "github.com/jmcluster/jmcluster/transport/pb"

// ReportDigest summarizes a set of executions as a TaskManager's report would list them, so
// that a new leader can ask a TaskManager whether it runs exactly what the committed graph says
// (RequestReportRequest.expect) and read one small answer instead of every execution's report
// (TaskManagerReport.as_expected). It covers what reconciliation keeps an execution on: its
// job, vertex, subtask and attempt, its slot, its start, its state, and how many partitions it
// produces (each of its own subtask's index) and channels it consumes. The combination is
// order-free (a count, a sum and an exclusive or of a 64-bit FNV-1a hash per execution), so
// neither side sorts.
type ReportDigest struct {
	Count    uint64
	Sum, Xor uint64
}

// Add counts one execution. produced is the number of partitions it produces, and ownIndex
// whether each has the subtask's index (a report naming another index does not match the
// graph, so such an execution gets a hash no graph gives).
func (d *ReportDigest) Add(jobID, vertexID string, subtask int32, attemptID string, slot int32, start int64, state pb.ExecutionState, produced int, ownIndex bool, consumed int) {
	h := uint64(fnvOffset)
	h = fnvString(h, jobID)
	h = fnvString(h, vertexID)
	h = fnvUint(h, uint64(uint32(subtask)))
	h = fnvString(h, attemptID)
	h = fnvUint(h, uint64(uint32(slot)))
	h = fnvUint(h, uint64(start))
	h = fnvUint(h, uint64(state))
	h = fnvUint(h, uint64(produced))
	if !ownIndex {
		h = fnvUint(h, ^uint64(0))
	}
	h = fnvUint(h, uint64(consumed))
	d.Count++
	d.Sum += h
	d.Xor ^= h
}

// AddReport counts an execution from its report.
func (d *ReportDigest) AddReport(r *pb.ExecutionReport) {
	own := true
	for _, p := range r.GetProduced() {
		own = own && p.GetPartitionIndex() == r.GetSubtaskIndex()
	}
	d.Add(r.GetJobId(), r.GetVertexId(), r.GetSubtaskIndex(), r.GetAttemptId(), r.GetSlotIndex(), r.GetStartTimestamp(), r.GetState(),
		len(r.GetProduced()), own, len(r.GetConsumed()))
}

// Proto is the digest as a report request carries it.
func (d ReportDigest) Proto() *pb.ReportExpectation {
	return &pb.ReportExpectation{Count: d.Count, Sum: d.Sum, Xor: d.Xor}
}

// Matches reports whether the digest is the expectation e (a nil e matches nothing).
func (d ReportDigest) Matches(e *pb.ReportExpectation) bool {
	return e != nil && d.Count == e.GetCount() && d.Sum == e.GetSum() && d.Xor == e.GetXor()
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	h = fnvUint(h, uint64(len(s)))
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvUint(h, v uint64) uint64 {
	for i := 0; i < 8; i++ {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}
