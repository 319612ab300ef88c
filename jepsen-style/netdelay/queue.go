// Package netdelay delays and drops a network namespace's packets in user space, for kernels
// without sch_netem. An iptables rule in the namespace sends packets to an NFQUEUE; a Queue,
// a netlink socket opened inside that namespace, reads only each packet's id (copy mode meta)
// and gives it its verdict later: NF_ACCEPT after the delay plus a uniform jitter, or NF_DROP
// with the loss probability. Until its verdict a packet stays in the kernel, so nothing is
// copied, rebuilt or reinjected, and the packet that leaves is the one that was sent.
//
// The rule carries --queue-bypass: while no Queue is bound (never opened, closed, or its
// process died) packets pass the rule as if it were not there.
package netdelay

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// MaxLen is the most packets the kernel holds for one queue; beyond it the kernel drops new
// packets (as netem drops beyond its limit) and counts them in queue_dropped.
const MaxLen = 20000

// Constants of the nfnetlink_queue protocol (linux/netfilter/nfnetlink_queue.h).
const (
	subsysQueue = 3 // NFNL_SUBSYS_QUEUE

	msgPacket       = 0 // NFQNL_MSG_PACKET
	msgVerdict      = 1 // NFQNL_MSG_VERDICT
	msgConfig       = 2 // NFQNL_MSG_CONFIG
	msgVerdictBatch = 3 // NFQNL_MSG_VERDICT_BATCH

	attrPacketHdr  = 1 // NFQA_PACKET_HDR
	attrVerdictHdr = 2 // NFQA_VERDICT_HDR

	cfgCmd    = 1 // NFQA_CFG_CMD
	cfgParams = 2 // NFQA_CFG_PARAMS
	cfgMaxLen = 3 // NFQA_CFG_QUEUE_MAXLEN
	cfgMask   = 4 // NFQA_CFG_MASK
	cfgFlags  = 5 // NFQA_CFG_FLAGS

	cmdBind   = 1 // NFQNL_CFG_CMD_BIND
	cmdUnbind = 2 // NFQNL_CFG_CMD_UNBIND

	copyMeta = 1 // NFQNL_COPY_META
	flagGSO  = 4 // NFQA_CFG_F_GSO: hand over GSO packets whole (we never read the payload)

	verdictDrop   = 0 // NF_DROP
	verdictAccept = 1 // NF_ACCEPT
)

// Shape is what a Queue does to every packet: drop it with probability LossPct/100, else hold
// it Delay plus a jitter drawn uniformly from [-Jitter, +Jitter] (netem's "delay D J" without a
// distribution table; independent draws, so packets can be reordered, as with netem).
type Shape struct {
	Delay   time.Duration
	Jitter  time.Duration
	LossPct int
	// Seed seeds the per-packet draws, so the same packet sequence gets the same delays and
	// losses.
	Seed int64
}

// Validate reports a shape the queue cannot apply.
func (s Shape) Validate() error {
	switch {
	case s.Delay < 0 || s.Jitter < 0:
		return fmt.Errorf("netdelay: delay %s and jitter %s must not be negative", s.Delay, s.Jitter)
	case s.Jitter > s.Delay:
		return fmt.Errorf("netdelay: jitter %s must not exceed the delay %s", s.Jitter, s.Delay)
	case s.LossPct < 0 || s.LossPct > 100:
		return fmt.Errorf("netdelay: loss %d%% must be within 0-100%%", s.LossPct)
	}
	return nil
}

// Stats counts what a Queue did.
type Stats struct {
	Packets  uint64        // verdicts asked for
	Dropped  uint64        // given NF_DROP for loss
	MaxHeld  int           // most packets held at once
	MaxDelay time.Duration // longest hold drawn
	Errors   uint64        // netlink errors while reading or giving verdicts
	LastErr  string        // the last of them
}

// Queue is a bound NFQUEUE of one namespace.
type Queue struct {
	conn  *netlink.Conn
	num   uint16
	shape Shape

	mu      sync.Mutex
	rng     *rand.Rand
	pending holdHeap
	maxID   uint32
	seen    bool
	stats   Stats
	closed  bool

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// NamespacePath is the handle `ip netns add NAME` leaves for a named namespace.
func NamespacePath(name string) string { return filepath.Join("/var/run/netns", name) }

// Open binds queue num inside the network namespace at nsPath ("" for the caller's own) and
// starts shaping whatever the namespace's rules send to it. Close releases every held packet.
func Open(nsPath string, num uint16, shape Shape) (*Queue, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	cfg := &netlink.Config{}
	if nsPath != "" {
		f, err := os.Open(nsPath)
		if err != nil {
			return nil, fmt.Errorf("netdelay: open namespace: %w", err)
		}
		defer f.Close()
		cfg.NetNS = int(f.Fd())
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("netdelay: netlink socket in %s: %w", nsPath, err)
	}
	q := &Queue{conn: conn, num: num, shape: shape, rng: rand.New(rand.NewPCG(uint64(shape.Seed), 0x6e657464656c6179)),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := q.bind(); err != nil {
		conn.Close()
		return nil, err
	}
	q.wg.Add(2)
	go q.read()
	go q.release()
	return q, nil
}

// bind configures the queue: a large receive buffer (a packet message lost to a full buffer
// is a packet the kernel drops), bind, copy mode meta, maximum length, whole GSO packets.
func (q *Queue) bind() error {
	if raw, err := q.conn.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
		})
	}
	// The kernel reports no ENOBUFS to a reader that cannot act on it; the lost packet shows
	// in the queue's user_dropped counter.
	_ = q.conn.SetOption(netlink.NoENOBUFS, true)
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0xffff)
	params[4] = copyMeta
	maxLen := make([]byte, 4)
	binary.BigEndian.PutUint32(maxLen, MaxLen)
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, flagGSO)
	steps := []struct {
		what  string
		attrs []attr
	}{
		{"bind", []attr{{cfgCmd, []byte{cmdBind, 0, 0, 0}}}},
		{"copy mode", []attr{{cfgParams, params}}},
		{"maximum length", []attr{{cfgMaxLen, maxLen}}},
		{"flags", []attr{{cfgMask, mask}, {cfgFlags, mask}}},
	}
	for _, s := range steps {
		m := message(msgConfig, q.num, s.attrs...)
		m.Header.Flags |= netlink.Acknowledge
		if _, err := q.conn.Execute(m); err != nil {
			return fmt.Errorf("netdelay: queue %d %s: %w", q.num, s.what, err)
		}
	}
	return nil
}

// read takes every packet message and schedules its verdict.
func (q *Queue) read() {
	defer q.wg.Done()
	for {
		msgs, err := q.conn.Receive()
		select {
		case <-q.done:
			return
		default:
		}
		if err != nil {
			q.noteErr(err)
			if errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EBADF) {
				return
			}
			continue
		}
		now := time.Now()
		for _, m := range msgs {
			if m.Header.Type != netlink.HeaderType(subsysQueue<<8|msgPacket) {
				continue
			}
			id, err := PacketID(m.Data)
			if err != nil {
				q.noteErr(err)
				continue
			}
			q.schedule(id, now)
		}
	}
}

func (q *Queue) schedule(id uint32, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.stats.Packets++
	if !q.seen || int32(id-q.maxID) > 0 {
		q.maxID, q.seen = id, true
	}
	if q.shape.LossPct > 0 && q.rng.IntN(100) < q.shape.LossPct {
		q.stats.Dropped++
		heap.Push(&q.pending, hold{due: now, id: id, verdict: verdictDrop})
	} else {
		d := q.shape.Delay
		if q.shape.Jitter > 0 {
			d += time.Duration(q.rng.Int64N(int64(2*q.shape.Jitter)+1)) - q.shape.Jitter
		}
		if d > q.stats.MaxDelay {
			q.stats.MaxDelay = d
		}
		heap.Push(&q.pending, hold{due: now.Add(d), id: id, verdict: verdictAccept})
	}
	if len(q.pending) > q.stats.MaxHeld {
		q.stats.MaxHeld = len(q.pending)
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// release gives the verdicts that are due, several per system call.
func (q *Queue) release() {
	defer q.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		now := time.Now()
		var due []netlink.Message
		for len(q.pending) > 0 && !q.pending[0].due.After(now) {
			h := heap.Pop(&q.pending).(hold)
			due = append(due, verdict(msgVerdict, q.num, h.verdict, h.id))
		}
		next := time.Hour
		if len(q.pending) > 0 {
			next = q.pending[0].due.Sub(now)
		}
		q.mu.Unlock()
		for len(due) > 0 {
			n := min(len(due), 64)
			if _, err := q.conn.SendMessages(due[:n]); err != nil {
				q.noteErr(err)
			}
			due = due[n:]
		}
		timer.Reset(next)
		select {
		case <-q.done:
			return
		case <-q.wake:
		case <-timer.C:
		}
	}
}

func (q *Queue) noteErr(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.stats.Errors++
	q.stats.LastErr = err.Error()
}

// Stats returns the counters so far.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// Number is the queue's NFQUEUE number.
func (q *Queue) Number() uint16 { return q.num }

// Held is the number of packets waiting for their verdict.
func (q *Queue) Held() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// Close accepts every packet still held (also those whose message is not read yet), unbinds
// the queue and closes the socket. Remove the rules that feed the queue first: a packet queued
// after Close's accept would be dropped when the queue is unbound.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.pending = nil
	maxID, seen := q.maxID, q.seen
	q.mu.Unlock()
	close(q.done)
	var errs []error
	// A batch verdict covers every queued packet whose id is not after the one given (ids
	// compare modulo 2^32, as the kernel's nfq_id_after does): half the id space past the
	// last id read reaches every packet the kernel still holds.
	if !seen {
		maxID = 0
	}
	if _, err := q.conn.Send(verdict(msgVerdictBatch, q.num, verdictAccept, maxID+1<<30)); err != nil {
		errs = append(errs, fmt.Errorf("netdelay: release held packets: %w", err))
	}
	if _, err := q.conn.Send(message(msgConfig, q.num, attr{cfgCmd, []byte{cmdUnbind, 0, 0, 0}})); err != nil {
		errs = append(errs, fmt.Errorf("netdelay: unbind queue %d: %w", q.num, err))
	}
	errs = append(errs, q.conn.Close())
	q.wg.Wait()
	return errors.Join(errs...)
}

type attr struct {
	typ  uint16
	data []byte
}

// message builds an nfnetlink queue message: nfgenmsg (family AF_UNSPEC, version 0, the queue
// number big-endian) and the attributes.
func message(typ uint8, num uint16, attrs ...attr) netlink.Message {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	for _, a := range attrs {
		ae.Bytes(a.typ, a.data)
	}
	b, _ := ae.Encode()
	data := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint16(data[2:], num)
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysQueue<<8 | uint16(typ)), Flags: netlink.Request},
		Data:   append(data, b...),
	}
}

func verdict(typ uint8, num uint16, v, id uint32) netlink.Message {
	hdr := make([]byte, 8)
	binary.BigEndian.PutUint32(hdr, v)
	binary.BigEndian.PutUint32(hdr[4:], id)
	return message(typ, num, attr{attrVerdictHdr, hdr})
}

// PacketID reads the packet id from the body of an NFQNL_MSG_PACKET message (nfgenmsg, then
// attributes; NFQA_PACKET_HDR starts with the big-endian id).
func PacketID(data []byte) (uint32, error) {
	if len(data) < 4 {
		return 0, fmt.Errorf("netdelay: packet message of %d bytes, shorter than its 4-byte header", len(data))
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return 0, fmt.Errorf("netdelay: packet message attributes: %w", err)
	}
	for ad.Next() {
		if ad.Type() == attrPacketHdr {
			b := ad.Bytes()
			if len(b) < 4 {
				return 0, fmt.Errorf("netdelay: packet header of %d bytes, want at least 4", len(b))
			}
			return binary.BigEndian.Uint32(b), nil
		}
	}
	if err := ad.Err(); err != nil {
		return 0, fmt.Errorf("netdelay: packet message attributes: %w", err)
	}
	return 0, errors.New("netdelay: packet message without a packet header")
}

type hold struct {
	due     time.Time
	id      uint32
	verdict uint32
}

type holdHeap []hold

func (h holdHeap) Len() int { return len(h) }
func (h holdHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return int32(h[i].id-h[j].id) < 0
}
func (h holdHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)   { *h = append(*h, x.(hold)) }
func (h *holdHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
