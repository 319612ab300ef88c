package nemesis

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/netdelay"
)

// DelayChain is the mangle-table chain, inside every node namespace, that sends the packets the
// node sends out of its interface to the user-space queue (netdelay) while a delay or loss
// fault is on. It is hooked into OUTPUT for that interface only, once; healing flushes it.
//
// Egress only, as netem on the interface would be: a delay on every JobMaster adds the delay
// once to each direction between two JMs and once to a JM's round trip with a TaskManager or
// the client. Queuing INPUT as well would count it twice. The mangle table runs before the
// filter table, so a packet released by the queue still meets the partition rules.
const DelayChain = "JMC-DELAY"

// DelayPrepareArgs are the iptables argument lists that create DelayChain and hook it into
// OUTPUT for packets leaving by dev.
func DelayPrepareArgs(dev string) [][]string {
	return [][]string{
		{"-w", "-t", "mangle", "-N", DelayChain},
		{"-w", "-t", "mangle", "-I", "OUTPUT", "-o", dev, "-j", DelayChain},
	}
}

// DelayRuleArgs sends every packet through DelayChain to the queue. --queue-bypass lets
// packets pass while no queue reader is bound, so a crashed harness leaves no node cut off.
func DelayRuleArgs() []string {
	return []string{"-w", "-t", "mangle", "-A", DelayChain, "-j", "NFQUEUE",
		"--queue-num", strconv.Itoa(netdelay.Number), "--queue-bypass"}
}

// DelayHealArgs flushes DelayChain.
func DelayHealArgs() []string { return []string{"-w", "-t", "mangle", "-F", DelayChain} }

// Shape turns a Netem setting into the user-space queue's shape. The per-packet draws are
// seeded from the fault's pick and the node, so a seed gives the same sequence every run.
func Shape(n Netem, pick int64, node string) netdelay.Shape {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	return netdelay.Shape{
		Delay:   time.Duration(n.DelayMs) * time.Millisecond,
		Jitter:  time.Duration(min(n.JitterMs, n.DelayMs)) * time.Millisecond,
		LossPct: n.LossPct,
		Seed:    pick ^ int64(h.Sum64()),
	}
}

// applyQueued starts a delay or loss on node in user space: the queue is bound first, then
// the rule that feeds it is added, so no packet meets the rule before a reader is there.
func (e *Executor) applyQueued(ctx context.Context, node string, n Netem, pick int64) error {
	if e.NetNS == nil {
		return fmt.Errorf("nemesis: delay on %s: the executor knows no namespaces (Executor.NetNS)", node)
	}
	e.mu.Lock()
	old := e.queues[node]
	delete(e.queues, node)
	e.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	q, err := netdelay.Open(netdelay.NamespacePath(e.NetNS(node)), netdelay.Number, Shape(n, pick, node))
	if err != nil {
		return fmt.Errorf("nemesis: delay on %s: %w", node, err)
	}
	if _, err := e.T.Exec(ctx, node, "iptables", DelayRuleArgs()...); err != nil {
		_ = q.Close()
		return err
	}
	e.mu.Lock()
	if e.queues == nil {
		e.queues = map[string]*netdelay.Queue{}
	}
	e.queues[node] = q
	e.mu.Unlock()
	return nil
}

// clearQueued ends a user-space delay or loss on node: the rule is flushed first, then the
// queue releases what it still holds and is closed. Its counters go to Logf.
func (e *Executor) clearQueued(ctx context.Context, node string) error {
	_, err := e.T.Exec(ctx, node, "iptables", DelayHealArgs()...)
	e.mu.Lock()
	q := e.queues[node]
	delete(e.queues, node)
	e.mu.Unlock()
	if q == nil {
		return err
	}
	kernel := ""
	if out, kerr := e.T.Exec(ctx, node, "cat", netdelay.ProcFile); kerr == nil {
		if ks, perr := netdelay.ParseProc(out, netdelay.Number); perr == nil {
			kernel = fmt.Sprintf(", kernel: %d dropped on a full queue, %d on a full socket", ks.QueueDrops, ks.UserDrops)
		}
	}
	held := q.Held()
	cerr := q.Close()
	if e.Logf != nil {
		s := q.Stats()
		e.Logf("netdelay %s: %d packets, %d dropped for loss, %d held at most, %d released at heal, longest hold %s, %d netlink errors%s%s",
			node, s.Packets, s.Dropped, s.MaxHeld, held, s.MaxDelay.Round(time.Millisecond), s.Errors, lastErr(s.LastErr), kernel)
	}
	if cerr != nil {
		return fmt.Errorf("nemesis: delay on %s: %w", node, cerr)
	}
	return err
}

func lastErr(s string) string {
	if s == "" {
		return ""
	}
	return " (last: " + s + ")"
}
