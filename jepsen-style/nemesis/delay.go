package nemesis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/netdelay"
)

// DelayChain is the mangle-table chain, inside every node namespace, that sends the packets
// arriving from a delayed or lossy node to a user-space queue (netdelay). It is hooked into
// PREROUTING for the node's interface once; healing removes the rules in it.
//
// A delay or loss "on node X" is netem on X's egress: every packet X sends waits (or is lost)
// before any other node gets it. The packets are held where they arrive, one queue per
// receiving node for each sender, not in X's OUTPUT: a packet held there still counts against
// its TCP socket's small-queue budget (netem orphans the packets it holds, an NFQUEUE cannot),
// and a stream of small writes then crawled at a few packets per delay (measured: 2.7 s median
// latency for a 100 ms delay). Each packet crosses one delay: a delay on every JobMaster adds
// it once to each direction between two JMs and once to a JM's round trip with a TaskManager
// or the client. The mangle table runs before filter, so a released packet still meets the
// partition chain.
const DelayChain = "JMC-DELAY"

// QueueBase is the NFQUEUE number of the first prepared node's packets; node i of Prepare's
// list has QueueBase+i in every other namespace (queues are per namespace).
const QueueBase = 100

// DelayPrepareArgs are the iptables argument lists that create DelayChain and hook it into
// PREROUTING for packets arriving on dev.
func DelayPrepareArgs(dev string) [][]string {
	return [][]string{
		{"-w", "-t", "mangle", "-N", DelayChain},
		{"-w", "-t", "mangle", "-I", "PREROUTING", "-i", dev, "-j", DelayChain},
	}
}

// DelayRuleArgs sends the packets from ip to queue num; op is "-A" to add, "-D" to delete.
// --queue-bypass lets packets pass while no reader is bound, so a crashed harness leaves no
// node cut off.
func DelayRuleArgs(op, ip string, num int) []string {
	return []string{"-w", "-t", "mangle", op, DelayChain, "-s", ip + "/32", "-j", "NFQUEUE",
		"--queue-num", strconv.Itoa(num), "--queue-bypass"}
}

// DelayHealArgs flushes DelayChain.
func DelayHealArgs() []string { return []string{"-w", "-t", "mangle", "-F", DelayChain} }

// Shape turns a Netem setting into the shape of the queue that holds src's packets at dst.
// The per-packet draws are seeded from the fault's pick and both nodes, so a seed gives the
// same sequence every run.
func Shape(n Netem, pick int64, src, dst string) netdelay.Shape {
	h := fnv.New64a()
	_, _ = h.Write([]byte(src + ">" + dst))
	return netdelay.Shape{
		Delay:   time.Duration(n.DelayMs) * time.Millisecond,
		Jitter:  time.Duration(min(n.JitterMs, n.DelayMs)) * time.Millisecond,
		LossPct: n.LossPct,
		Seed:    pick ^ int64(h.Sum64()),
	}
}

// held is one queue: src's packets arriving at dst.
type held struct {
	src, dst string
	rule     []string // the -A arguments; -D with the same removes the rule
	q        *netdelay.Queue
}

// applyQueued starts a delay or loss of src's packets in user space: in every other prepared
// namespace a queue is bound first, then the rule that feeds it is added, so no packet meets
// a rule without a reader.
func (e *Executor) applyQueued(ctx context.Context, src string, n Netem, pick int64) error {
	book, ok := e.T.(AddressBook)
	if e.NetNS == nil || !ok {
		return fmt.Errorf("nemesis: delay on %s: the executor knows no namespaces (Executor.NetNS) or addresses", src)
	}
	idx := -1
	for i, x := range e.nodes {
		if x == src {
			idx = i
		}
	}
	ip := book.IP(src)
	if idx < 0 || ip == "" {
		return fmt.Errorf("nemesis: delay on %s: not a prepared node with an address", src)
	}
	if err := e.clearQueued(ctx, src); err != nil {
		return err
	}
	for _, dst := range e.nodes {
		if dst == src {
			continue
		}
		q, err := netdelay.Open(netdelay.NamespacePath(e.NetNS(dst)), uint16(QueueBase+idx), Shape(n, pick, src, dst))
		if err != nil {
			return errors.Join(fmt.Errorf("nemesis: delay on %s at %s: %w", src, dst, err), e.clearQueued(ctx, src))
		}
		h := &held{src: src, dst: dst, rule: DelayRuleArgs("-A", ip, QueueBase+idx), q: q}
		if _, err := e.T.Exec(ctx, dst, "iptables", h.rule...); err != nil {
			_ = q.Close()
			return errors.Join(err, e.clearQueued(ctx, src))
		}
		e.mu.Lock()
		e.queues = append(e.queues, h)
		e.mu.Unlock()
	}
	return nil
}

// clearQueued ends the delay or loss of node's packets: at every receiver the rule is removed
// first, then the queue releases what it still holds and is closed. The summed counters go to
// Logf. When no queue is left in node's own namespace its chain is flushed as well, so heal-all
// leaves every chain empty even after a half-applied fault.
func (e *Executor) clearQueued(ctx context.Context, node string) error {
	e.mu.Lock()
	var mine, rest []*held
	for _, h := range e.queues {
		if h.src == node {
			mine = append(mine, h)
		} else {
			rest = append(rest, h)
		}
	}
	e.queues = rest
	receiving := false
	for _, h := range rest {
		receiving = receiving || h.dst == node
	}
	e.mu.Unlock()
	sort.Slice(mine, func(i, j int) bool { return mine[i].dst < mine[j].dst })

	var errs []error
	var sum netdelay.Stats
	var kernelDrops, releasedAtHeal uint64
	for _, h := range mine {
		del := append([]string(nil), h.rule...)
		del[3] = "-D"
		if _, err := e.T.Exec(ctx, h.dst, "iptables", del...); err != nil {
			errs = append(errs, err)
		}
		if out, err := e.T.Exec(ctx, h.dst, "cat", netdelay.ProcFile); err == nil {
			if ks, err := netdelay.ParseProc(out, h.q.Number()); err == nil {
				kernelDrops += ks.QueueDrops + ks.UserDrops
			}
		}
		releasedAtHeal += uint64(h.q.Held())
		if err := h.q.Close(); err != nil {
			errs = append(errs, fmt.Errorf("nemesis: delay on %s at %s: %w", h.src, h.dst, err))
		}
		s := h.q.Stats()
		sum.Packets += s.Packets
		sum.Dropped += s.Dropped
		sum.MaxHeld = max(sum.MaxHeld, s.MaxHeld)
		sum.MaxDelay = max(sum.MaxDelay, s.MaxDelay)
		sum.Errors += s.Errors
		if s.LastErr != "" {
			sum.LastErr = s.LastErr
		}
	}
	if !receiving {
		if _, err := e.T.Exec(ctx, node, "iptables", DelayHealArgs()...); err != nil {
			errs = append(errs, err)
		}
	}
	if len(mine) > 0 && e.Logf != nil {
		last := ""
		if sum.LastErr != "" {
			last = " (last: " + sum.LastErr + ")"
		}
		e.Logf("netdelay %s at %d receivers: %d packets, %d dropped for loss, %d dropped by the kernel, %d held at most by one receiver, %d released at heal, longest hold %s, %d netlink errors%s",
			node, len(mine), sum.Packets, sum.Dropped, kernelDrops, sum.MaxHeld, releasedAtHeal, sum.MaxDelay.Round(time.Millisecond), sum.Errors, last)
	}
	return errors.Join(errs...)
}
