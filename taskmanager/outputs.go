package taskmanager

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jmcluster/jmcluster/dataplane"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// outputs routes what a task emits to its result partitions: its records to the partitions
// that are not dead_letters, its dead letters (operator.Info.DeadLetters) to those that are
// (the partitions of its edges to the job's dead-letter vertex). Barriers and watermarks are
// not routed here: they go to every partition.
type outputs struct {
	t          *task
	records    []*dataplane.Partition
	dead       []*dataplane.Partition
	maxRecord  int
	beforeDead func() error // a source's: inject a triggered checkpoint's barrier first
}

// newOutputs sorts the task's partitions (parts, made from produced in its order) by what
// they carry.
func newOutputs(t *task, produced []*pb.ResultPartitionDeploymentDescriptor, parts []*dataplane.Partition, maxRecord int) *outputs {
	o := &outputs{t: t, maxRecord: maxRecord}
	for i, p := range parts {
		if produced[i].GetDeadLetters() {
			o.dead = append(o.dead, p)
		} else {
			o.records = append(o.records, p)
		}
	}
	return o
}

// deadLetterEmit is the task's operator.Info.DeadLetters, set before its operator is built:
// the dead letters go to *out once the partitions are produced. nil when the descriptor has
// no dead_letters partition (the operator then fails on a dead letter, naming the record and
// its reason: operator.ErrNoDeadLetterOutput).
func deadLetterEmit(d *pb.TaskDeploymentDescriptor, out **outputs) operator.Emit {
	for _, pd := range d.GetProduced() {
		if pd.GetDeadLetters() {
			return func(r operator.Record) error { return (*out).deadLetter(r) }
		}
	}
	return nil
}

// add sends a record to every partition of records.
func (o *outputs) add(ctx context.Context, r operator.Record) error {
	for _, p := range o.records {
		if err := p.Add(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// deadLetter sends a dead letter (operator.DeadLetterRecord) to every dead_letters partition
// and counts it in the task's dead letters (its heartbeat reports them). A dead letter over the TaskManager's MaxRecordSize is sent without the record's key
// and value, saying so, rather than failing the task: the record would fail it again on every
// restart.
func (o *outputs) deadLetter(r operator.Record) error {
	if o == nil || len(o.dead) == 0 { // deadLetterEmit hands out no Emit then
		return fmt.Errorf("%w: the task has no dead-letter partition (record %d/%d)", operator.ErrNoDeadLetterOutput, r.Origin, r.Seq)
	}
	if o.beforeDead != nil {
		if err := o.beforeDead(); err != nil {
			return err
		}
	}
	if r.Size() > o.maxRecord {
		var err error
		if r, err = trimDeadLetter(r, o.maxRecord); err != nil {
			return err
		}
	}
	o.t.deadLetters.Add(1)
	for _, p := range o.dead {
		if err := p.Add(o.t.ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// trimDeadLetter returns dead letter r without its record's key and value bytes, its reason
// saying so (and without its own key when that is still too much); an error wrapping
// ErrRecordTooLarge when it is still over max.
func trimDeadLetter(r operator.Record, max int) (operator.Record, error) {
	size := r.Size()
	var d operator.DeadLetter
	if err := json.Unmarshal(r.Value, &d); err != nil {
		return r, fmt.Errorf("the dead letter of record %d/%d is not a DeadLetter: %w", r.Origin, r.Seq, err)
	}
	d.Reason += fmt.Sprintf(" (the record's key and value are left out: its dead letter of %d bytes is over the TaskManager's maximum record size %d bytes, MaxRecordSize, --max-record-size)", size, max)
	d.Key, d.KeyBase64, d.Value, d.ValueBase64 = "", nil, "", nil
	v, err := json.Marshal(d)
	if err != nil {
		return r, err
	}
	r.Value = v
	if r.Size() > max {
		r.Key = nil
	}
	if n := r.Size(); n > max {
		return r, fmt.Errorf("%w: the dead letter of record %d/%d is %d bytes even without the record's key and value, over the TaskManager's maximum record size %d bytes (MaxRecordSize, --max-record-size)",
			ErrRecordTooLarge, r.Origin, r.Seq, n, max)
	}
	return r, nil
}
