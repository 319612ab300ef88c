package agent_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/taskmanager"
	"github.com/jmcluster/jmcluster/testkit/testcluster"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestNumericJobOnTaskManagersOfTwoRecordFormats: a TaskManager of protocol 3, whose channels
// read records of the int64 format as a build before bytes records did, and one of this build
// run a batch job whose ALL_TO_ALL edge has channels both ways between them: the numeric
// records (8-byte key and value, no event time) go to the older consumers in the int64 fields
// they read, and the job finishes without a restart. (Records the older format cannot carry
// fail their channel with an error naming it: dataplane's
// TestOlderConsumerGetsNumericRecordsOrARefusal.)
func TestNumericJobOnTaskManagersOfTwoRecordFormats(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{JMs: 3})
	c.Opts.TM = func(cfg *taskmanager.Config) {
		cfg.Slots = 6
		if cfg.ID == "tm-old" {
			cfg.Int64Records, cfg.ProtocolVersion = true, jobmaster.BytesRecordsProtocol-1
		}
	}
	c.AddTM("tm-old")
	c.AddTM("tm-new")
	l := c.Leader()
	testcluster.WaitFor(t, 10*time.Second, "both TMs registered with their protocols", func() (bool, string) {
		o, _ := l.A.JM.Registry().Get("tm-old")
		n, _ := l.A.JM.Registry().Get("tm-new")
		return o.Protocol == jobmaster.BytesRecordsProtocol-1 && n.Protocol == taskmanager.ProtocolVersion,
			fmt.Sprintf("tm-old %d, tm-new %d", o.Protocol, n.Protocol)
	})
	id := c.Submit(testcluster.BatchKeyedSum("formats-mixed", 8, 2000, 64))
	rec := c.WaitJob(id, "the job FINISHED", 60*time.Second, func(r *pb.JobRecord) bool {
		return r.GetStatus() == pb.JobStatus_JOB_STATUS_FINISHED || r.GetStatus() == pb.JobStatus_JOB_STATUS_FAILED
	})
	if rec.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job %s: %s", rec.GetStatus(), testcluster.Describe(rec))
	}
	on := map[string]map[string]int{}
	for _, v := range rec.GetExecutionGraph().GetVertices() {
		for _, ev := range v.Subtasks {
			if n := ev.GetCurrent().GetAttemptNumber(); n != 0 {
				t.Fatalf("%s/%d ran %d times: a channel between the two formats failed", v.GetVertexId(), ev.GetSubtaskIndex(), n+1)
			}
			tm := ev.GetCurrent().GetSlot().GetTmId()
			if on[v.GetVertexId()] == nil {
				on[v.GetVertexId()] = map[string]int{}
			}
			on[v.GetVertexId()][tm]++
		}
	}
	if on["filter"]["tm-old"] == 0 || on["filter"]["tm-new"] == 0 || on["sink"]["tm-old"] == 0 || on["sink"]["tm-new"] == 0 {
		t.Fatalf("tasks per vertex and TM %v: producers and consumers must run on both", on)
	}
}
