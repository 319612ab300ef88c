package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

const tmUsage = `usage: jmnode tm <list | drain ID> [flags]

  jmnode tm list                  the TaskManagers: addresses, slots in use, state, drained
  jmnode tm drain ID              stop placing tasks on ID and move its regions elsewhere
  jmnode tm drain ID --undo       end the drain: ID takes new tasks again

A drain is replicated state (a new leader keeps draining). Each pipelined region with a task on
the drained TaskManager is cancelled as a whole and deployed on the others, once; no restart is
counted against the job's restart strategy, and every other region keeps running. A region
moves whole (its finished members run again); one whose tasks all finished stays. drain waits
(--wait) until no slot of the TaskManager is in use. A BLOCKING result a finished task produced
there may still be read by regions that have not run yet: wait for them before stopping it.
`

func runTMList(args []string) error {
	fs := flag.NewFlagSet("tm list", flag.ContinueOnError)
	usageFor(fs, "jmnode tm list [--json]", "Lists the TaskManagers as one JobMaster sees them: addresses, slots in use, state, drained.")
	cf := newCLIFlags(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.ClusterStatusResponse, error) {
		return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	})
	if err != nil {
		return err
	}
	markUnreachableByLeader(cf, resp) // the leader's refusals
	if *cf.json {
		return printJSON(&pb.ClusterStatusResponse{NodeId: resp.NodeId, TaskManagers: resp.TaskManagers})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "TASKMANAGER\tGRPC\tDATA\tSLOTS\tUSED\tSTATE\tDRAINED")
	for _, tm := range resp.TaskManagers {
		drained := "-"
		if tm.Drained {
			drained = "since " + time.UnixMilli(tm.DrainedSince).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", tm.Id, orDash(tm.GrpcAddress), orDash(tm.DataAddress), tm.Slots, tm.SlotsUsed, tm.State, drained)
	}
	return w.Flush()
}

func runTMDrain(args []string) error {
	fs := flag.NewFlagSet("tm drain", flag.ContinueOnError)
	usageFor(fs, "jmnode tm drain ID [--undo] [--force] [--wait 2m]",
		"Drains a TaskManager: no new task is placed on it, and the regions with a task on it move to the others (once, no restart counted).")
	cf := newCLIFlags(fs, false)
	undo := fs.Bool("undo", false, "end the drain: the TaskManager takes new tasks again")
	force := fs.Bool("force", false, "drain even when the other TaskManagers lack the free slots (its regions then wait for slots)")
	wait := fs.Duration("wait", 2*time.Minute, "wait this long for the TaskManager to hold no running task (0: do not wait)")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("tm drain needs the TaskManager's ID (jmnode tm list)")
	}
	id := fs.Arg(0)
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.DrainTaskManagerResponse, error) {
		return c.operator().DrainTaskManager(ctx, &pb.DrainTaskManagerRequest{TmId: id, Undo: *undo, Force: *force})
	})
	if err != nil {
		return err
	}
	if *undo {
		fmt.Printf("%s is no longer drained (index %d): new tasks may be placed on it\n", id, resp.Index)
		return nil
	}
	fmt.Printf("%s drained (index %d): %d executions in %d regions move to the other TaskManagers\n", id, resp.Index, resp.Executions, resp.Regions)
	if *wait == 0 || resp.Executions == 0 {
		return nil
	}
	c, err := cf.dial()
	if err != nil {
		return err
	}
	defer c.cc.Close()
	deadline := time.Now().Add(*wait)
	last, printed := "", ""
	for {
		st, err := askOnce(c, func(ctx context.Context) (*pb.ClusterStatusResponse, error) {
			return c.client().ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		})
		if err != nil {
			last = err.Error()
		} else {
			for _, tm := range st.TaskManagers {
				if tm.Id != id {
					continue
				}
				if tm.SlotsUsed == 0 {
					fmt.Printf("%s holds no task: drained\n", id)
					return nil
				}
				last = fmt.Sprintf("%s still uses %d slots", id, tm.SlotsUsed)
			}
		}
		if last != printed {
			fmt.Println(last)
			printed = last
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s drained, but its tasks have not all moved within %s (last seen: %s; jmnode job status shows which wait)", id, *wait, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
