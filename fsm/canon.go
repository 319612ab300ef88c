package fsm

import (
	"github.com/jmcluster/jmcluster/transport/pb"
)

// maxCanonEntries bounds each of canon's tables: a table that reaches it is emptied and fills
// again with what is applied next (the values already shared stay shared; only sharing with
// what was dropped is lost), so the tables cannot grow with the TaskManagers and timestamps a
// long-lived cluster has seen.
const (
	maxCanonEntries = 1 << 14
	maxCanonStamps  = 1 << 10
)

// canon shares the values that many executions hold alike, so that a replica keeps one copy
// of each instead of one per execution: the TaskManagers' addresses and ids, their slots, and
// the (state, time) pairs of the state changes that a command's executions pass through
// together. Each command is decoded into values of its own (proto.Unmarshal allocates every
// string and message anew), so 100,000 executions on ten TaskManagers held 100,000 copies of
// ten addresses.
//
// Sharing changes no value: only equal values are shared, a message only when it has no
// unknown fields (two messages that encode alike are then equal in every byte), and the state
// never changes a slot or a state timestamp in place (a state change appends a new one; every
// read returns a deep copy; WithJob's callers only read). So no hash, snapshot byte or result
// depends on it, nor on the tables' contents: they only decide which of equal values is kept.
// The tables are the state's, not in snapshots; a restore builds a new state whose records
// are shared as they are added (canonRecord).
type canon struct {
	strs   map[string]string
	slots  map[slotKey]*pb.SlotID
	stamps map[stampKey]*pb.StateTimestamp
}

type stampKey struct {
	state pb.ExecutionState
	ts    int64
}

func newCanon() canon {
	return canon{strs: map[string]string{}, slots: map[slotKey]*pb.SlotID{}, stamps: map[stampKey]*pb.StateTimestamp{}}
}

// str returns the kept copy of s.
func (c *canon) str(s string) string {
	if s == "" {
		return ""
	}
	if k, ok := c.strs[s]; ok {
		return k
	}
	if len(c.strs) >= maxCanonEntries {
		clear(c.strs)
	}
	c.strs[s] = s
	return s
}

// slot returns the kept slot equal to sl (sl itself when it is the first, or when it cannot be
// shared).
func (c *canon) slot(sl *pb.SlotID) *pb.SlotID {
	if sl == nil || len(sl.ProtoReflect().GetUnknown()) != 0 {
		return sl
	}
	k := slotKey{sl.TmId, sl.Index}
	if kept, ok := c.slots[k]; ok {
		return kept
	}
	if len(c.slots) >= maxCanonEntries {
		clear(c.slots)
	}
	sl.TmId = c.str(sl.TmId)
	c.slots[slotKey{sl.TmId, sl.Index}] = sl
	return sl
}

// stamp returns the kept state change (st, ts), made when there is none.
func (c *canon) stamp(st pb.ExecutionState, ts int64) *pb.StateTimestamp {
	k := stampKey{st, ts}
	if kept, ok := c.stamps[k]; ok {
		return kept
	}
	if len(c.stamps) >= maxCanonStamps {
		clear(c.stamps)
	}
	t := &pb.StateTimestamp{State: st, Timestamp: ts}
	c.stamps[k] = t
	return t
}

// sharedStamp returns the kept state change equal to t (t itself when it cannot be shared).
func (c *canon) sharedStamp(t *pb.StateTimestamp) *pb.StateTimestamp {
	if t == nil || len(t.ProtoReflect().GetUnknown()) != 0 {
		return t
	}
	return c.stamp(t.State, t.Timestamp)
}

// execution shares ex's addresses, slot and state changes, and gives its state changes a list
// of their own length (a decoded repeated field keeps the capacity it grew to).
func (c *canon) execution(ex *pb.Execution) {
	if ex == nil {
		return
	}
	ex.TmGrpcAddress = c.str(ex.TmGrpcAddress)
	ex.TmDataAddress = c.str(ex.TmDataAddress)
	ex.Slot = c.slot(ex.Slot)
	if cap(ex.StateTimestamps) != len(ex.StateTimestamps) {
		ex.StateTimestamps = append([]*pb.StateTimestamp(nil), ex.StateTimestamps...)
		ex.StateTimestamps = ex.StateTimestamps[:len(ex.StateTimestamps):len(ex.StateTimestamps)]
	}
	for i, t := range ex.StateTimestamps {
		ex.StateTimestamps[i] = c.sharedStamp(t)
	}
}

// canonRecord shares what a restored job record holds alike: its executions' values (above),
// each subtask's vertex id with its job vertex's, and each partition's producer attempt and
// address with the producer's current execution's (RefreshProducers copies them so; a
// snapshot's decoding makes a copy of each). Only equal strings are replaced.
func (c *canon) canonRecord(rec *pb.JobRecord) {
	eg := rec.GetExecutionGraph()
	vertices := make(map[string]*pb.ExecutionJobVertex, len(eg.GetVertices()))
	for _, ejv := range eg.GetVertices() {
		vertices[ejv.GetVertexId()] = ejv
		for _, ev := range ejv.GetSubtasks() {
			if ev.GetVertexId() == ejv.GetVertexId() {
				ev.VertexId = ejv.VertexId
			}
			c.execution(ev.GetCurrent())
			for _, h := range ev.GetHistory() {
				c.execution(h)
			}
		}
	}
	for _, r := range eg.GetResults() {
		producers := vertices[r.GetProducerVertexId()].GetSubtasks()
		for _, p := range r.GetPartitions() {
			i := p.GetPartitionIndex()
			if i < 0 || int(i) >= len(producers) {
				continue
			}
			cur := producers[i].GetCurrent()
			if cur == nil {
				continue
			}
			if p.ProducerAttemptId == cur.AttemptId {
				p.ProducerAttemptId = cur.AttemptId
			}
			if p.DataAddress == cur.TmDataAddress {
				p.DataAddress = cur.TmDataAddress
			}
		}
	}
}
