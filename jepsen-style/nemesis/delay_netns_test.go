package nemesis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/netdelay"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"golang.org/x/sys/unix"
)

// nsTarget is a Target of bare namespaces: no processes, only commands inside them.
type nsTarget struct{ topo *netns.Topology }

var errNoProcess = errors.New("no processes in this test")

func (t nsTarget) Kill(string) error                    { return errNoProcess }
func (t nsTarget) Signal(string, syscall.Signal) error  { return errNoProcess }
func (t nsTarget) Revive(context.Context, string) error { return errNoProcess }
func (t nsTarget) IP(n string) string                   { return t.topo.IP(n) }
func (t nsTarget) Exec(ctx context.Context, n, name string, args ...string) (string, error) {
	return netns.Exec(ctx, t.topo.NS(n), name, args...)
}

// inNS runs fn on a thread inside namespace ns; sockets fn creates stay there.
func inNS(ns string, fn func() error) error {
	target, err := os.Open(filepath.Join(netns.NamedNSDir, ns))
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return err // the thread stays locked and dies with this goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// delayNet builds a run topology of its own and prepares the nemesis chains in jm1 and jm2.
func delayNet(t *testing.T) (*netns.Topology, *Executor) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and iptables rules inside them")
	}
	topo, err := netns.NewTopology(fmt.Sprintf("nd%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := topo.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Teardown(context.Background()); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	e := &Executor{T: nsTarget{topo}, Dev: netns.NodeDevice, NetNS: topo.NS, Logf: t.Logf}
	nodes := []string{"jm1", "jm2", "tm1"}
	if err := e.Prepare(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.HealAll(context.Background(), nodes, nil) })
	return topo, e
}

// queue returns the queue holding src's packets at dst.
func (e *Executor) queue(t *testing.T, src, dst string) *netdelay.Queue {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.queues {
		if h.src == src && h.dst == dst {
			return h.q
		}
	}
	t.Fatalf("no queue for %s's packets at %s", src, dst)
	return nil
}

// echoConn starts a TCP echo server in jm2 and returns a connection to it from jm1.
func echoConn(t *testing.T, topo *netns.Topology) net.Conn {
	t.Helper()
	var ln net.Listener
	if err := inNS(topo.NS("jm2"), func() (err error) {
		ln, err = net.Listen("tcp4", topo.IP("jm2")+":7999")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := netns.Dialer(topo.NS("jm1"))(ctx, topo.IP("jm2")+":7999")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrips measures n one-byte round trips on c, sorted.
func roundTrips(t *testing.T, c net.Conn, n int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	buf := []byte{0}
	for i := 0; i < n; i++ {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

func TestUserSpaceDelayAddsTheDelayOnceAndHealRemovesIt(t *testing.T) {
	topo, e := delayNet(t)
	ctx := context.Background()
	c := echoConn(t, topo)
	const delay, jitter = 100 * time.Millisecond, 10 * time.Millisecond

	base := roundTrips(t, c, 20)
	t.Logf("round trip without delay: min %s median %s max %s", base[0], base[len(base)/2], base[len(base)-1])

	// Delay on jm1's egress: each round trip carries one packet jm1 sends, held (at jm2) at
	// least delay-jitter.
	a := Action{Fault: Fault{Kind: Delay, Pick: 3}, Netem: map[string]Netem{"jm1": {DelayMs: 100, JitterMs: 10}}}
	if err := e.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	one := roundTrips(t, c, 20)
	t.Logf("round trip, delay %s±%s on jm1: min %s median %s max %s", delay, jitter, one[0], one[len(one)/2], one[len(one)-1])
	if one[0] < delay*8/10 {
		t.Fatalf("fastest delayed round trip %s, want at least %s", one[0], delay*8/10)
	}
	if s := e.queue(t, "jm1", "jm2").Stats(); s.Packets < 20 {
		t.Fatalf("jm1's queue at jm2 saw %d packets for 20 round trips", s.Packets)
	}
	_ = e.queue(t, "jm1", "tm1") // every other prepared node holds jm1's packets too

	// Delay on both ends: the round trip carries it once in each direction.
	both := Action{Fault: Fault{Kind: Delay, Pick: 4}, Netem: map[string]Netem{"jm1": {DelayMs: 100, JitterMs: 10}, "jm2": {DelayMs: 100, JitterMs: 10}}}
	if err := e.Apply(ctx, both); err != nil {
		t.Fatal(err)
	}
	two := roundTrips(t, c, 10)
	t.Logf("round trip, delay on jm1 and jm2: min %s median %s max %s", two[0], two[len(two)/2], two[len(two)-1])
	if two[0] < 2*delay*8/10 {
		t.Fatalf("fastest round trip with both ends delayed %s, want at least %s", two[0], 2*delay*8/10)
	}

	if err := e.Heal(ctx, both); err != nil {
		t.Fatal(err)
	}
	healed := roundTrips(t, c, 20)
	t.Logf("round trip after heal: min %s median %s max %s", healed[0], healed[len(healed)/2], healed[len(healed)-1])
	if healed[0] >= delay*8/10 {
		t.Fatalf("after heal every round trip still took %s or more", healed[0])
	}
	for _, n := range []string{"jm1", "jm2", "tm1"} {
		out, err := netns.Exec(ctx, topo.NS(n), "iptables", "-w", "-t", "mangle", "-S", DelayChain)
		if err != nil || strings.Contains(out, "NFQUEUE") {
			t.Fatalf("%s: chain after heal: %q %v", n, out, err)
		}
		if out, _ := netns.Exec(ctx, topo.NS(n), "cat", netdelay.ProcFile); strings.TrimSpace(out) != "" {
			t.Fatalf("%s: a queue is still bound after heal: %q", n, out)
		}
	}
}

func TestPacketsPassWhenTheQueueReaderIsGone(t *testing.T) {
	topo, e := delayNet(t)
	ctx := context.Background()
	c := echoConn(t, topo)
	a := Action{Fault: Fault{Kind: Delay, Pick: 5}, Netem: map[string]Netem{"jm1": {DelayMs: 100}}}
	if err := e.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	if rt := roundTrips(t, c, 3); rt[0] < 80*time.Millisecond {
		t.Fatalf("delayed round trip %s", rt[0])
	}
	// The reader goes away (as when the harness dies) but the rule stays: --queue-bypass.
	if err := e.queue(t, "jm1", "jm2").Close(); err != nil {
		t.Fatal(err)
	}
	rt := roundTrips(t, c, 10)
	t.Logf("round trip with the rule but no reader: min %s median %s", rt[0], rt[len(rt)/2])
	if rt[0] >= 80*time.Millisecond {
		t.Fatalf("without a reader every round trip still took %s or more", rt[0])
	}
	if err := e.Heal(ctx, a); err != nil {
		t.Fatal(err)
	}
}

func TestUserSpaceLossDropsTheSeededFraction(t *testing.T) {
	topo, e := delayNet(t)
	ctx := context.Background()
	var rx *net.UDPConn
	if err := inNS(topo.NS("jm2"), func() error {
		ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(topo.IP("jm2")), Port: 7998})
		rx = ln
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if raw, err := rx.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) })
	}
	var tx *net.UDPConn
	if err := inNS(topo.NS("jm1"), func() (err error) {
		tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(topo.IP("jm2")), Port: 7998})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	// Warm up ARP before the fault (ARP is not IP; only the datagrams meet the queue).
	if _, err := tx.Write([]byte("warm")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	_ = rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := rx.ReadFromUDP(buf); err != nil {
		t.Fatal(err)
	}

	a := Action{Fault: Fault{Kind: Loss, Pick: 9}, Netem: map[string]Netem{"jm1": {LossPct: 30}}}
	if err := e.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	const sent = 1000
	for i := 0; i < sent; i++ {
		if _, err := tx.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	q := e.queue(t, "jm1", "jm2")
	deadline := time.Now().Add(20 * time.Second)
	got := 0
	var s netdelay.Stats
	for {
		s = q.Stats()
		if s.Packets == sent && got == sent-int(s.Dropped) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d datagrams, queue stats %+v", got, sent, s)
		}
		_ = rx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := rx.ReadFromUDP(buf); err == nil {
			got++
		}
	}
	t.Logf("loss 30%%: %d of %d datagrams dropped", s.Dropped, sent)
	if s.Dropped < 200 || s.Dropped > 400 {
		t.Fatalf("dropped %d of %d at 30%% loss", s.Dropped, sent)
	}
	if err := e.Heal(ctx, a); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := tx.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ {
		_ = rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := rx.ReadFromUDP(buf); err != nil {
			t.Fatalf("after heal only %d of 50 datagrams arrived: %v", i, err)
		}
	}
}

// A stream of small writes from a delayed node arrives about the delay late. Holding the
// packets in the sender's own OUTPUT hook (they still count against the socket's TCP
// small-queue budget there) let only a few packets through per delay: a median of 2.7 s for
// 100 ms. The bound below is that regression's, ten times the delay.
func TestStreamFromADelayedNodeIsNotThrottled(t *testing.T) {
	topo, e := delayNet(t)
	ctx := context.Background()
	var ln net.Listener
	if err := inNS(topo.NS("jm2"), func() (err error) {
		ln, err = net.Listen("tcp4", topo.IP("jm2")+":7997")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const msgs, size = 1000, 200
	lat := make(chan []time.Duration, 1)
	go func() {
		var out []time.Duration
		defer func() { lat <- out }()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for len(out) < msgs {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			out = append(out, time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(buf)))))
		}
	}()
	const delay = 100 * time.Millisecond
	a := Action{Fault: Fault{Kind: Delay, Pick: 6}, Netem: map[string]Netem{"jm1": {DelayMs: 100, JitterMs: 20}}}
	if err := e.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := netns.Dialer(topo.NS("jm1"))(dctx, topo.IP("jm2")+":7997")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, size)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for i := 0; i < msgs; i++ {
		<-tick.C
		binary.BigEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	out := <-lat
	if len(out) != msgs {
		t.Fatalf("received %d of %d messages", len(out), msgs)
	}
	slices.Sort(out)
	t.Logf("one-way latency of %d %d-byte writes, 1 ms apart, delay %s±20ms: min %s median %s p99 %s max %s",
		msgs, size, delay, out[0], out[msgs/2], out[msgs*99/100], out[msgs-1])
	if out[0] < delay*8/10 {
		t.Fatalf("a message arrived after %s, sooner than the delay allows", out[0])
	}
	if out[msgs/2] > 10*delay {
		t.Fatalf("median latency %s: the stream is throttled, not delayed", out[msgs/2])
	}
}
