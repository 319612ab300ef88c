package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jmcluster/jmcluster/internal/version"
)

// command is one node of the CLI's command tree: a leaf runs with the arguments after its
// name; a group hands its first argument to the subcommand of that name. run dispatches
// through this table and the --help walk (TestEveryCommandAnswersHelp) walks it, so the tree
// the tests check is the tree users run.
type command struct {
	name  string
	about string                    // one line: what it does (a group's generated usage lists it)
	run   func(args []string) error // a leaf
	subs  []*command                // a group
	usage string                    // a group's own usage text; empty: generated from subs
}

// commandTree is jmnode's command table. The top level's text is usage (main.go).
func commandTree() *command {
	raft := func(sub string) func([]string) error {
		return func(args []string) error { return runRaft(sub, args) }
	}
	keyring := func(sub string) func([]string) error {
		return func(args []string) error { return runKeyring(sub, args) }
	}
	return &command{name: "jmnode", usage: usage, subs: []*command{
		{name: "jobmaster", about: "run a JobMaster replica", run: runJobMaster},
		{name: "taskmanager", about: "run a TaskManager", run: runTaskManager},
		{name: "demo", about: "run a local 3-JM + 3-TM cluster, a streaming job and a leader kill", run: runDemo},
		{name: "demo-pipeline", about: "run NATS, PostgreSQL and a cluster: clicks -> per user and minute -> a table, through a TaskManager kill and a leader kill", run: runDemoPipeline},
		{name: "job", about: "submit, list, show and cancel jobs", subs: []*command{
			{name: "submit", about: "submit a job spec (JSON, see examples/)", run: jobSubmit},
			{name: "list", about: "list jobs", run: jobList},
			{name: "status", about: "a job, a row per vertex (--vertex NAME, --all: subtasks)", run: jobStatus},
			{name: "checkpoints", about: "a checkpointed job's checkpoints", run: jobCheckpoints},
			{name: "cancel", about: "cancel a job", run: jobCancel},
		}},
		{name: "status", about: "the cluster: leader, epoch, reconciliation, TaskManagers", run: runStatus},
		{name: "raft", about: "the Raft configuration", subs: []*command{
			{name: "peers", about: "list the Raft configuration", run: raft("peers")},
			{name: "join", about: "add a JobMaster as a voter", run: raft("join")},
			{name: "remove", about: "remove a JobMaster from the configuration", run: raft("remove")},
			{name: "transfer-leadership", about: "hand leadership to another voter (--to ID)", run: raft("transfer-leadership")},
		}},
		{name: "members", about: "the gossip pool", run: runMembers},
		{name: "gossip", about: "the gossip encryption keys", usage: gossipUsage, subs: []*command{
			{name: "keygen", about: "a new gossip encryption key", run: runGossipKeygen},
			{name: "keyring", about: "rotate the gossip key on every member", usage: gossipUsage, subs: []*command{
				{name: "list", about: "every live member's keys", run: keyring("list")},
				{name: "install", about: "add a key on every live member", run: keyring("install")},
				{name: "use", about: "encrypt with a key on every live member", run: keyring("use")},
				{name: "remove", about: "drop a key on every live member", run: keyring("remove")},
			}},
		}},
		{name: "snapshot", about: "save, inspect and restore the replicated state", usage: snapshotUsage, subs: []*command{
			{name: "save", about: "a consistent copy of the replicated state", run: runSnapshotSave},
			{name: "inspect", about: "what a snapshot file holds", run: runSnapshotInspect},
			{name: "restore", about: "bring a cluster that lost its state back from a file", run: runSnapshotRestore},
		}},
		{name: "artifact", about: "store, list and remove artifacts (WebAssembly modules)", usage: artifactUsage, subs: []*command{
			{name: "put", about: "store a file; prints its sha256 and size", run: runArtifactPut},
			{name: "list", about: "the stored artifacts and the jobs that use them", run: runArtifactList},
			{name: "rm", about: "remove an artifact no running job uses", run: runArtifactRm},
		}},
		{name: "tm", about: "the TaskManagers", usage: tmUsage, subs: []*command{
			{name: "list", about: "the TaskManagers", run: runTMList},
			{name: "drain", about: "move a TaskManager's regions elsewhere", run: runTMDrain},
		}},
		{name: "healthcheck", about: "one GET of /readyz or /healthz", run: runHealthcheck},
		{name: "failpoints", about: "the failpoints JMNODE_FAILPOINTS can set", run: runFailpoints},
		{name: "tls", about: "files for mutual TLS", usage: tlsUsage, subs: []*command{
			{name: "ca", about: "a development CA", usage: tlsUsage, subs: []*command{
				{name: "create", about: "write a new development CA", run: runTLSCACreate},
			}},
			{name: "cert", about: "a certificate with a role", usage: tlsUsage, subs: []*command{
				{name: "create", about: "write a certificate signed by the CA", run: runTLSCertCreate},
			}},
		}},
		{name: "version", about: "print the version", run: runVersion},
		{name: "help", about: "print this text", run: func([]string) error { fmt.Print(usage); return nil }},
	}}
}

// isHelp says whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

// dispatch runs c with args; path is the command line that led to it ("jmnode tm").
func (c *command) dispatch(path string, args []string) error {
	if c.run != nil {
		return c.run(args)
	}
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, c.usageText(path))
		if c.name == "jmnode" {
			return errors.New("no command given")
		}
		names := c.subNames(", ")
		if i := strings.LastIndex(names, ", "); i >= 0 {
			names = names[:i] + " or " + names[i+2:]
		}
		return fmt.Errorf("%s: say %s", strings.TrimPrefix(path, "jmnode "), names)
	}
	if isHelp(args[0]) {
		fmt.Print(c.usageText(path))
		return nil
	}
	for _, s := range c.subs {
		if s.name == args[0] {
			return s.dispatch(path+" "+s.name, args[1:])
		}
	}
	fmt.Fprint(os.Stderr, c.usageText(path))
	if c.name == "jmnode" {
		return fmt.Errorf("unknown command %q", args[0])
	}
	return fmt.Errorf("%s: unknown command %q (%s)", strings.TrimPrefix(path, "jmnode "), args[0], c.subNames(", "))
}

// usageText is a group's usage: its own text, or one generated from its subcommands.
func (c *command) usageText(path string) string {
	if c.usage != "" {
		return c.usage
	}
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s <%s> [flags]\n\n", path, c.subNames(" | "))
	for _, s := range c.subs {
		fmt.Fprintf(&b, "  %-22s %s\n", s.name, s.about)
	}
	fmt.Fprintf(&b, "\nRun '%s <command> --help' for a command's flags.\n", path)
	return b.String()
}

func (c *command) subNames(sep string) string {
	names := make([]string, len(c.subs))
	for i, s := range c.subs {
		names[i] = s.name
	}
	return strings.Join(names, sep)
}

// runVersion prints the version.
func runVersion(args []string) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Println("usage: jmnode version\n\nPrints the version of this jmnode build.")
		return nil
	}
	if len(args) > 0 {
		return errors.New("version takes no arguments")
	}
	fmt.Println("jmnode", version.Version)
	return nil
}
