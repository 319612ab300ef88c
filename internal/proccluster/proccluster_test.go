package proccluster

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCommandLines(t *testing.T) {
	dir := t.TempDir()
	nodes, err := Local(dir, LocalOptions{Slots: 4, JMFlags: []string{"--fast-raft"}, TMFlags: []string{"--fence-timeout", "2s"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New("/bin/jmnode", nodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.JMs) != 3 || len(c.TMs) != 3 || c.Proc("tm2") != c.TMs[1] || c.Proc("nope") != nil {
		t.Fatalf("slots: %d JMs, %d TMs", len(c.JMs), len(c.TMs))
	}
	if _, err := c.Get("nope"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("Get(nope): %v", err)
	}
	flag := func(args []string, name string) string {
		i := slices.Index(args, name)
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("%s missing in %v", name, args)
		}
		return args[i+1]
	}
	jm1 := c.JMs[0].Args()
	others := c.JMs[1].Addrs.GRPC + "," + c.JMs[2].Addrs.GRPC
	if jm1[0] != "jobmaster" || flag(jm1, "--join") != others || flag(jm1, "--bootstrap-expect") != "3" ||
		flag(jm1, "--data-dir") != filepath.Join(dir, "jm1") || jm1[len(jm1)-1] != "--fast-raft" {
		t.Fatalf("jm1: %v", jm1)
	}
	if strings.Contains(flag(jm1, "--gossip-join"), c.JMs[0].Addrs.Gossip) {
		t.Fatalf("jm1 joins its own gossip address: %v", jm1)
	}
	tm3 := c.TMs[2].Args()
	if tm3[0] != "taskmanager" || flag(tm3, "--jm") != c.JoinAddrs() || flag(tm3, "--slots") != "4" ||
		flag(tm3, "--event-log") != filepath.Join(dir, "tm3-events.jsonl") || flag(tm3, "--fence-timeout") != "2s" {
		t.Fatalf("tm3: %v", tm3)
	}
	if _, err := New("x", []Node{{Name: "a", Role: JobMaster}, {Name: "a", Role: TaskManager}}); err == nil {
		t.Fatal("a repeated name was accepted")
	}
}

// sleeper is a slot whose process is sh sleeping (the wrapper swallows the jmnode command
// line), so the lifecycle is tested without a cluster.
func sleeper(t *testing.T) *Proc {
	c, err := New("jmnode", []Node{{Name: "tm1", Role: TaskManager, LogPath: filepath.Join(t.TempDir(), "tm1.log"),
		Wrap: []string{"sh", "-c", "exec sleep 60"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(time.Second) })
	return c.TMs[0]
}

func TestLifecycle(t *testing.T) {
	p := sleeper(t)
	if p.Running() || p.Exited() != nil || p.Revive() != nil {
		t.Fatal("a fresh slot runs, or does not start")
	}
	if err := p.Start(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second start: %v", err)
	}
	pid := p.Pid()
	if err := p.Signal(syscall.SIGSTOP); err != nil || !p.Paused() || !p.Running() {
		t.Fatalf("SIGSTOP: %v, paused %v", err, p.Paused())
	}
	if err := p.Revive(); err != nil || p.Paused() || p.Pid() != pid {
		t.Fatalf("revive of a paused process: %v, paused %v, pid %d -> %d", err, p.Paused(), pid, p.Pid())
	}
	if err := p.Kill(5 * time.Second); err != nil || p.Running() {
		t.Fatalf("kill: %v, running %v", err, p.Running())
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Kill")
	}
	if err := p.Signal(syscall.SIGCONT); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("signal to a dead process: %v", err)
	}
	if err := p.Revive(); err != nil || !p.Running() || p.Pid() == pid {
		t.Fatalf("revive of a dead process: %v", err)
	}
	p.Stop(5 * time.Second)
	lt := p.Lifetimes()
	if len(lt) != 2 || lt[0].End.Before(lt[0].Start) || lt[1].End.IsZero() || lt[1].Start.Before(lt[0].End) {
		t.Fatalf("lifetimes %v", lt)
	}
	if got := strings.Count(p.LogTail(10), "start tm1"); got != 2 {
		t.Fatalf("%d start lines in the log:\n%s", got, p.LogTail(10))
	}
}

func TestStopContinuesAPausedProcess(t *testing.T) {
	p := sleeper(t)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p.Stop(5 * time.Second) // returns only after the exit
	if p.Running() {
		t.Fatal("running after Stop")
	}
}

func TestAddJoinerJoinsTheOthersWithoutBootstrap(t *testing.T) {
	c, err := New("jmnode", []Node{
		{Name: "jm1", Role: JobMaster, Addrs: Addrs{GRPC: "10.0.0.1:7100", Gossip: "10.0.0.1:7300"}},
		{Name: "jm2", Role: JobMaster, Addrs: Addrs{GRPC: "10.0.0.2:7100", Gossip: "10.0.0.2:7300"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.AddJoiner(Node{Name: "jm4", Role: JobMaster, Addrs: Addrs{Raft: "10.0.0.4:7000", GRPC: "10.0.0.4:7100", Gossip: "10.0.0.4:7300"},
		DataDir: "/d/jm4", Flags: []string{"--x", "1"}, Wrap: []string{"ip", "netns", "exec", "ns4"}})
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(p.Args(), " ")
	if !strings.Contains(args, "--join 10.0.0.1:7100,10.0.0.2:7100") || !strings.Contains(args, "--gossip-join 10.0.0.1:7300,10.0.0.2:7300") ||
		strings.Contains(args, "--bootstrap-expect") || !strings.HasSuffix(args, "--x 1") || c.Proc("jm4") != p {
		t.Fatalf("joiner's command line: %s", args)
	}
	if _, err := c.AddJoiner(Node{Name: "jm4", Role: JobMaster}); err == nil {
		t.Fatal("a repeated name was added")
	}
}
