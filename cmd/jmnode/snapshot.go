package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// snapshotChunk is the size of the chunks `snapshot restore` sends (the server's are the same).
const snapshotChunk = 1 << 20

const snapshotUsage = `usage: jmnode snapshot <save FILE | inspect FILE | restore FILE> [flags]

  jmnode snapshot save FILE      a consistent copy of the replicated state, from the leader
  jmnode snapshot inspect FILE   what a snapshot file holds: index, epoch, jobs, records by type
  jmnode snapshot restore FILE   bring a JobMaster cluster that lost its state back from FILE

save asks any JobMaster (--addr) for the leader and streams the copy from it once Raft
confirms its leadership; the file is written beside FILE and renamed over it when complete.
inspect reads the file offline and restores it as a JobMaster would, so a file that does not
restore is refused.
restore is disaster recovery: start new JobMasters with empty data directories (their leader
sees that the TaskManagers have seen a later epoch and waits, keeping their tasks), then
restore; the leader raises the state's epoch above every epoch a TaskManager has seen,
replaces the replicated state with the file's and reconciles it with the running tasks.
`

func runSnapshotSave(args []string) error {
	fs := flag.NewFlagSet("snapshot save", flag.ContinueOnError)
	usageFor(fs, "jmnode snapshot save FILE", "Saves a consistent copy of the replicated state, streamed from the leader.")
	cf := newCLIFlags(fs, false)
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("snapshot save needs FILE")
	}
	path := fs.Arg(0)
	st, err := ask(cf, func(ctx context.Context, c *conn) (*pb.ClusterStatusResponse, error) {
		return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	})
	if err != nil {
		return err
	}
	from, fromID := st.LeaderGrpcAddress, st.LeaderId
	if from == "" {
		// No established leader: a Raft leader whose state is behind the TaskManagers serves
		// the copy too (its state may be the best there is: save it, restore it).
		if from, fromID, err = raftLeader(cf); err != nil {
			return fmt.Errorf("no established leader: %w", err)
		}
	}
	leader := *cf.addr
	*cf.addr = from
	defer func() { *cf.addr = leader }()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: no such file
	var index uint64
	var size int64
	_, err = ask(cf, func(ctx context.Context, c *conn) (struct{}, error) {
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return struct{}{}, err
		}
		if err := tmp.Truncate(0); err != nil {
			return struct{}{}, err
		}
		size = 0
		stream, err := c.operator().SnapshotSave(ctx, &pb.SnapshotSaveRequest{})
		if err != nil {
			return struct{}{}, err
		}
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return struct{}{}, nil
			}
			if err != nil {
				return struct{}{}, err
			}
			index = chunk.Index
			n, err := tmp.Write(chunk.Data)
			size += int64(n)
			if err != nil {
				return struct{}{}, err
			}
		}
	})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Refuse to keep a file that would not restore.
	f, err := os.Open(tmp.Name())
	if err != nil {
		return err
	}
	sum, err := fsm.InspectSnapshotFile(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("the snapshot received does not restore: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	fmt.Printf("saved the state at index %d from %s (%s): %d jobs, %d bytes, hash %s\n", index, fromID, from, len(sum.Jobs), size, sum.Hash)
	return nil
}

func runSnapshotInspect(args []string) error {
	fs := flag.NewFlagSet("snapshot inspect", flag.ContinueOnError)
	usageFor(fs, "jmnode snapshot inspect FILE [--json]", "Shows what a snapshot file holds, restoring it offline as a JobMaster would.")
	js := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("snapshot inspect needs FILE")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := fsm.InspectSnapshotFile(f)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if *js {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Printf("index %d, epoch %d (leader %s), %d bytes, hash %s\n", s.Index, s.Epoch, orDash(s.Leader), s.Bytes, s.Hash)
	fmt.Printf("%d jobs, %d reconciliation records, %d TaskManagers in the pool\n", len(s.Jobs), s.Reconciliations, s.PoolMembers)
	kinds := make([]string, 0, len(s.Records))
	for k := range s.Records {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "RECORD\tCOUNT\tBYTES")
	for _, k := range kinds {
		fmt.Fprintf(w, "%s\t%d\t%d\n", k, s.Records[k], s.RecordBytes[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "JOB ID\tNAME\tSTATUS\tEXECUTIONS\tRUNNING\tRESTARTS")
	for _, j := range s.Jobs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\n", j.ID, j.Name, j.Status, j.Executions, j.Running, j.Restarts)
	}
	return w.Flush()
}

func runSnapshotRestore(args []string) error {
	fs := flag.NewFlagSet("snapshot restore", flag.ContinueOnError)
	usageFor(fs, "jmnode snapshot restore FILE",
		"Replaces the replicated state of a JobMaster cluster with a snapshot file (disaster recovery), then waits for its reconciliation with the running tasks.")
	cf := newCLIFlags(fs, false)
	wait := fs.Duration("wait", 2*time.Minute, "after the restore, wait this long for the leader to reconcile the restored state (0: do not wait)")
	force := fs.Bool("force", false, "restore although the cluster's state is not behind its TaskManagers: the state it holds is replaced, and every task the file does not know is cancelled")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("snapshot restore needs FILE")
	}
	path := fs.Arg(0)
	file, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sum, err := fsm.InspectSnapshotFile(bytes.NewReader(file))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Printf("%s: the state at index %d, epoch %d: %d jobs, %d bytes, hash %s\n", path, sum.Index, sum.Epoch, len(sum.Jobs), sum.Bytes, sum.Hash)

	// The Raft leader serves the restore, established or not (one whose state is behind the
	// TaskManagers never establishes): its gRPC address is in the Raft configuration.
	leader, leaderID, err := raftLeader(cf)
	if err != nil {
		return err
	}
	c, err := dialAs(cf, leader)
	if err != nil {
		return err
	}
	defer c.cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout+time.Minute)
	defer cancel()
	stream, err := c.operator().SnapshotRestore(ctx)
	if err != nil {
		return c.explain(err)
	}
	for off := 0; off < len(file); off += snapshotChunk {
		if err := stream.Send(&pb.SnapshotChunk{Data: file[off:min(off+snapshotChunk, len(file))], Index: sum.Index, Force: *force && off == 0}); err != nil {
			break // CloseAndRecv returns the cause
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return c.explain(err)
	}
	fmt.Printf("restored by %s at index %d; the epoch raised to %d\n", leaderID, resp.Index, resp.EpochFloor)
	if *wait == 0 {
		return nil
	}
	// The leader establishes the next epoch and reconciles the restored state.
	deadline := time.Now().Add(*wait)
	var last string
	for {
		st, err := askOnce(c, func(ctx context.Context) (*pb.ClusterStatusResponse, error) {
			return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		})
		if err == nil {
			last = fmt.Sprintf("leader %s, epoch %d, reconciling %v", orDash(st.LeaderId), st.Epoch, st.Reconciling)
			if st.StateBehind != "" {
				last += ": " + st.StateBehind
			}
			if st.Epoch > resp.EpochFloor && st.LeaderGrpcAddress != "" && !st.Reconciling {
				for _, r := range st.Reconciliations {
					if r.Epoch == st.Epoch && r.Outcome != "in_progress" {
						n := r.GetCounts()
						fmt.Printf("%s leads at epoch %d; reconciliation %s: %d executions, %d kept running, %d finished, %d failed, %d missing, %d unknown cancelled\n",
							st.LeaderId, st.Epoch, r.Outcome, n.GetExecutions(), n.GetKeptRunning(), n.GetFinished(), n.GetFailed(), n.GetMissing(), n.GetCancelledUnknown())
						return nil
					}
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restored, but no reconciliation of the restored state within %s (last seen: %s)", *wait, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// raftLeader is the Raft leader's gRPC address and id as the JobMaster the flags name sees the
// Raft configuration (an established leader or not).
func raftLeader(cf cliFlags) (addr, id string, err error) {
	peers, err := ask(cf, func(ctx context.Context, c *conn) (*pb.RaftPeersResponse, error) {
		return c.operator().RaftPeers(ctx, &pb.RaftPeersRequest{})
	})
	if err != nil {
		return "", "", err
	}
	for _, p := range peers.Peers {
		if p.Leader && p.GrpcAddress != "" {
			return p.GrpcAddress, p.Id, nil
		}
	}
	return "", "", fmt.Errorf("no Raft leader with a known address (as %s sees the cluster)", *cf.addr)
}
