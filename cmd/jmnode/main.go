// Command jmnode is jmcluster's one binary: a JobMaster replica, a TaskManager, the operator
// CLI and a local demo cluster. It only parses flags and wires packages together.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

const usage = `jmnode — a Raft-replicated, highly available JobMaster cluster

usage: jmnode <command> [flags]

processes:
  jobmaster        run a JobMaster replica (Raft voter; the leader is the active JobMaster)
  taskmanager      run a TaskManager (slots, tasks, record exchange)
  demo             run a local 3-JM + 3-TM cluster, a streaming job and a leader kill
  demo-pipeline    run NATS, PostgreSQL and a cluster: clicks -> per user and minute -> a
                   table (or a stream), through a TaskManager kill and a leader kill

operator CLI (talks gRPC to any JobMaster: --addr or JMNODE_ADDR, default 127.0.0.1:7100):
  job submit FILE [--wait]   submit a job spec (JSON, see examples/; --checkpoint-interval DUR)
  job list                   list jobs
  job status ID              a job, a row per vertex (--vertex NAME, --all: subtasks)
  job checkpoints ID         a checkpointed job's checkpoints (docs/checkpoints.md)
  job cancel ID              cancel a job
  status                     the cluster: leader, epoch, reconciliation, TaskManagers
  raft peers | join | remove the Raft configuration
  raft transfer-leadership   hand leadership to another voter (--to ID)
  members                    the gossip pool
  tm list | drain ID         the TaskManagers; drain one (its regions move, no restart counted)
  artifact put FILE | list | rm HASH   artifacts (WebAssembly modules) in the replicated state
  snapshot save | inspect | restore FILE   a consistent copy of the replicated state, and
                             bringing a cluster that lost its state back from one
  gossip keygen              a new gossip encryption key
  gossip keyring list | install | use | remove   rotate the gossip key on every member
  healthcheck [--url URL]    one GET of /readyz (or /healthz): a container's health check
  version                    print the version
  help                       this text (also --help)
  tls ca create              a development CA for mutual TLS (docs/security.md)
  tls cert create            a certificate with a role (jobmaster, taskmanager, operator, reader)
  failpoints                 the failpoints JMNODE_FAILPOINTS can set (fault-suite builds only)

Every process and command takes --tls-ca, --tls-cert and --tls-key for mutual TLS; without
them it is plaintext (docs/security.md). Read commands take --json. Run 'jmnode <command> --help' for a command's flags.
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "jmnode:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	return commandTree().dispatch("jmnode", args)
}
