package taskmanager

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// fuzzRootToken in a seed's sink path stands for the fuzz run's temporary root directory, so
// that absolute paths into a directory the target can inspect are tried too.
const fuzzRootToken = "@ROOT@"

// FuzzTaskManagerService sends arbitrary SubmitTask, CancelTask, UpdatePartitionInfo and
// AcknowledgeTerminal requests (kind%4 picks the type, msg is its protobuf encoding) to the
// service of a real TaskManager, registered with a test JobMaster at epoch 1. The TM's work
// dir is root/work; root/outside is reachable from it through two symlinks (work/out,
// relative, and work/abs, absolute). Properties: nothing panics or hangs; nothing is created
// in root besides work/ and outside/, and outside/ stays empty; the epoch stays 1 (no request
// of these kinds may raise it unless a JobMaster names the epoch, and the JobMaster names 1);
// an INVALID_ARGUMENT starts, cancels and forgets no task. Data addresses in requests are pointed at the TM's own
// DataService so the target never dials out. Seeds: testdata/fuzz/FuzzTaskManagerService.
func FuzzTaskManagerService(f *testing.F) {
	root := f.TempDir()
	work, outside := filepath.Join(root, "work"), filepath.Join(root, "outside")
	for _, d := range []string{work, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink("../outside", filepath.Join(work, "out")); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(work, "abs")); err != nil {
		f.Fatal(err)
	}
	jm := startJM(f)
	tm := newTM(f, "fuzz", jm, func(c *Config) {
		c.WorkDir = work
		c.Logger = hclog.NewNullLogger()
		c.CancelWait = 50 * time.Millisecond
		c.InputConnectTimeout = 5 * time.Second
		c.HeartbeatInterval = 50 * time.Millisecond
	})
	waitFor(f, 20*time.Second, "registration at epoch 1", func() (bool, string) { return tm.Epoch() == 1, fmt.Sprint(tm.Epoch()) })
	svc := &controlService{tm: tm}

	f.Fuzz(func(t *testing.T, kind byte, msg []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var (
			err    error
			before map[string]bool
		)
		switch kind % 4 {
		case 0:
			var req pb.SubmitTaskRequest
			if proto.Unmarshal(msg, &req) != nil {
				return
			}
			tame(req.GetTask(), root, tm.DataAddr())
			before = liveTasks(tm)
			_, err = svc.SubmitTask(ctx, &req)
		case 1:
			var req pb.CancelTaskRequest
			if proto.Unmarshal(msg, &req) != nil {
				return
			}
			deployFixture(t, svc)
			before = liveTasks(tm)
			_, err = svc.CancelTask(ctx, &req)
		case 2:
			var req pb.UpdatePartitionInfoRequest
			if proto.Unmarshal(msg, &req) != nil {
				return
			}
			for _, c := range req.GetChannels() {
				tameChannel(c, tm.DataAddr())
			}
			deployFixture(t, svc)
			before = liveTasks(tm)
			_, err = svc.UpdatePartitionInfo(ctx, &req)
		case 3:
			var req pb.AcknowledgeTerminalRequest
			if proto.Unmarshal(msg, &req) != nil {
				return
			}
			deployFixture(t, svc)
			stopAll(t, tm) // terminal now: there is something to acknowledge
			before = liveTasks(tm)
			_, err = svc.AcknowledgeTerminal(ctx, &req)
		}
		if e := tm.Epoch(); e != 1 {
			t.Fatalf("epoch raised to %d (call error %v)", e, err)
		}
		if status.Code(err) == codes.InvalidArgument {
			if after := liveTasks(tm); !maps.Equal(before, after) {
				t.Fatalf("an INVALID_ARGUMENT changed the tasks: before %v, after %v", before, after)
			}
		}
		resetTM(t, tm)
		checkRoot(t, root, outside)
	})
}

// deployFixture starts the tasks the seeds of CancelTask, UpdatePartitionInfo and
// AcknowledgeTerminal name: source "a" of job "job" and its consumer "sink-sink", a checksum
// sink waiting for its producer's address.
func deployFixture(t *testing.T, svc *controlService) {
	src := source("job", "src", 0, 1, "a", 0, &pb.SequenceSource{RatePerSecond: 1000}, produces("r", 0, 1, forward, pipelined))
	sink := deploy("job", "sink", 0, 1, "sink-sink", 1, checksumOp("fixture.json"), gate("r", pipelined, channel("r", 0, 0, "", "")))
	for _, d := range []*pb.TaskDeploymentDescriptor{src, sink} {
		if _, err := svc.SubmitTask(context.Background(), &pb.SubmitTaskRequest{Epoch: 1, Task: d}); err != nil {
			t.Fatalf("fixture %s: %v", d.GetAttemptId(), err)
		}
	}
}

// tame points a descriptor's producer addresses at the TM itself and expands fuzzRootToken.
func tame(d *pb.TaskDeploymentDescriptor, root, dataAddr string) {
	switch k := d.GetOperator().GetKind().(type) {
	case *pb.Operator_FileSink:
		if k.FileSink != nil {
			k.FileSink.Path = strings.ReplaceAll(k.FileSink.Path, fuzzRootToken, root)
		}
	case *pb.Operator_ChecksumSink:
		if k.ChecksumSink != nil {
			k.ChecksumSink.Path = strings.ReplaceAll(k.ChecksumSink.Path, fuzzRootToken, root)
		}
	}
	for _, g := range d.GetInputs() {
		for _, c := range g.GetChannels() {
			tameChannel(c, dataAddr)
		}
	}
}

func tameChannel(c *pb.InputChannelDescriptor, dataAddr string) {
	if c != nil && c.ProducerDataAddress != "" {
		c.ProducerDataAddress = dataAddr
	}
}

// stopAll cancels every task and waits for it to end.
func stopAll(t *testing.T, tm *TaskManager) {
	for _, task := range tm.table.cancelAll("fuzz input done") {
		if !task.wait(10 * time.Second) {
			t.Fatalf("task %s did not stop within 10s of its cancel", task.attempt())
		}
	}
}

// liveTasks lists the tasks of the TM and whether each is still uncancelled.
func liveTasks(tm *TaskManager) map[string]bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := make(map[string]bool, len(tm.table.tasks))
	for id, task := range tm.table.tasks {
		out[id] = task.ctx.Err() == nil
	}
	return out
}

// resetTM stops and forgets every task, so each input starts from an empty TM.
func resetTM(t *testing.T, tm *TaskManager) {
	stopAll(t, tm)
	tm.mu.Lock()
	for id, task := range tm.table.tasks {
		if isTerminal(task.state) {
			tm.table.dropLocked(id)
		}
	}
	clear(tm.partitionExpiry)
	tm.mu.Unlock()
	tm.dp.ReleaseAll()
}

// checkRoot fails when anything but work/ and outside/ is in root, or anything is in outside/.
func checkRoot(t *testing.T, root, outside string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "work" && e.Name() != "outside" {
			t.Fatalf("written outside the work dir: %s", filepath.Join(root, e.Name()))
		}
	}
	if ents, err := os.ReadDir(outside); err != nil || len(ents) != 0 {
		t.Fatalf("written outside the work dir through a symlink: %v %v", ents, err)
	}
}
