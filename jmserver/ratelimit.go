package jmserver

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/jmcluster/jmcluster/transport"
)

// Defaults of WriteLimit. They admit every test and the fault suite's generator (three
// processes writing about three times a second in all, spread over the JobMasters) with room
// to spare, and stop a client that loops on SubmitJob from flooding the Raft log.
const (
	DefaultWriteRate         = 10.0 // writes per second per client
	DefaultWriteBurst        = 20
	DefaultWriteLimitClients = 4096 // clients whose limiters are kept
)

// WriteLimit bounds how fast one client may write (SubmitJob, CancelJob) through one JobMaster.
// Zero values mean the defaults.
type WriteLimit struct {
	// Rate is the writes per second a client may make on average (default 10; negative: no
	// limit). Flag --client-write-rate.
	Rate float64
	// Burst is how many writes a client may make at once (default 20). Flag --client-write-burst.
	Burst int
	// MaxClients bounds the limiters kept (default 4096): a client idle long enough for its
	// bucket to refill is forgotten (that loses nothing); beyond the bound the least recently
	// seen client is forgotten too, and starts again with a full bucket.
	MaxClients int
	// Key names the client a call comes from (default PeerIP). It is the seam authentication
	// uses to key the limit by certificate or token name instead.
	Key func(ctx context.Context) string
}

func (w WriteLimit) withDefaults() WriteLimit {
	if w.Rate == 0 {
		w.Rate = DefaultWriteRate
	}
	if w.Burst <= 0 {
		w.Burst = DefaultWriteBurst
	}
	if w.MaxClients <= 0 {
		w.MaxClients = DefaultWriteLimitClients
	}
	if w.Key == nil {
		w.Key = PeerIP
	}
	return w
}

// PeerIP is the default client key: the IP address the call came from ("unknown" without one).
func PeerIP(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}

// writeLimiter keeps one token bucket per client, at most MaxClients of them, in least recently
// used order.
type writeLimiter struct {
	cfg    WriteLimit
	refill time.Duration // an empty bucket is full again after this long
	now    func() time.Time

	mu    sync.Mutex
	lru   *list.List // of *clientBucket, most recently seen first
	byKey map[string]*list.Element
}

type clientBucket struct {
	key  string
	lim  *rate.Limiter
	last time.Time
}

// newWriteLimiter returns nil when the limit is off.
func newWriteLimiter(cfg WriteLimit) *writeLimiter {
	cfg = cfg.withDefaults()
	if cfg.Rate < 0 || math.IsInf(cfg.Rate, 1) {
		return nil
	}
	return &writeLimiter{
		cfg:    cfg,
		refill: time.Duration(float64(cfg.Burst) / cfg.Rate * float64(time.Second)),
		now:    time.Now,
		lru:    list.New(),
		byKey:  map[string]*list.Element{},
	}
}

// admit takes one write token of the client ctx names, or returns the refusal: RESOURCE_EXHAUSTED
// naming the limit, with a RetryInfo of when the client's next write will be admitted.
func (l *writeLimiter) admit(ctx context.Context) error {
	if l == nil {
		return nil
	}
	key := l.cfg.Key(ctx)
	retry := l.take(key)
	if retry == 0 {
		return nil
	}
	retry = retry.Round(time.Millisecond) + time.Millisecond // never suggest a retry that is still early
	return transport.RateLimitedError(
		fmt.Sprintf("client %s is over the write rate limit of %g per second, burst %d (--client-write-rate, --client-write-burst); retry after %s",
			key, l.cfg.Rate, l.cfg.Burst, retry),
		map[string]string{"client": key, "rate": strconv.FormatFloat(l.cfg.Rate, 'g', -1, 64), "burst": strconv.Itoa(l.cfg.Burst)},
		retry)
}

// take returns 0 when key's bucket had a token (taken), else how long until it has one.
func (l *writeLimiter) take(key string) time.Duration {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetIdle(now)
	var b *clientBucket
	if e := l.byKey[key]; e != nil {
		b = e.Value.(*clientBucket)
		l.lru.MoveToFront(e)
	} else {
		b = &clientBucket{key: key, lim: rate.NewLimiter(rate.Limit(l.cfg.Rate), l.cfg.Burst)}
		l.byKey[key] = l.lru.PushFront(b)
		for l.lru.Len() > l.cfg.MaxClients {
			l.remove(l.lru.Back())
		}
	}
	b.last = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	return 0
}

// forgetIdle drops the buckets not used for a full refill: they are full, so a new bucket for
// the same client is the same bucket.
func (l *writeLimiter) forgetIdle(now time.Time) {
	for e := l.lru.Back(); e != nil && now.Sub(e.Value.(*clientBucket).last) >= l.refill; e = l.lru.Back() {
		l.remove(e)
	}
}

func (l *writeLimiter) remove(e *list.Element) {
	delete(l.byKey, e.Value.(*clientBucket).key)
	l.lru.Remove(e)
}

// clients is the number of buckets kept (for tests).
func (l *writeLimiter) clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// peerResolveTimeout bounds the name lookup of a forwarding peer's advertised host.
const peerResolveTimeout = time.Second

// admitWrite applies the write limit on the JM the client called. A call a follower forwarded
// here was admitted there already and is not counted again, so a client is limited once per
// call, and the clients of one follower do not share one bucket (the follower's address) on
// the leader. Such a call is trusted only when it comes from the host of the Raft peer it
// names; anything else is limited like any client. (Once calls are authenticated, the check
// becomes "the caller holds a JobMaster certificate".)
func (g *guard) admitWrite(ctx context.Context) error {
	if g.limit == nil || g.forwardedByPeer(ctx) {
		return nil
	}
	return g.limit.admit(ctx)
}

// forwardedByPeer reports whether ctx is a call forwarded by a Raft peer of this node: it
// carries the forwarded mark with a peer's id and comes from that peer's advertised host.
func (g *guard) forwardedByPeer(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md.Get(forwardedKey)) == 0 || g.d.Node == nil {
		return false
	}
	from := net.ParseIP(PeerIP(ctx))
	if from == nil {
		return false
	}
	peers, err := g.d.Node.Peers()
	if err != nil {
		return false
	}
	id := md.Get(forwardedKey)[0]
	for _, p := range peers {
		if p.Id != id {
			continue
		}
		for _, addr := range []string{p.Address, p.GrpcAddress} {
			if hostIs(ctx, addr, from) {
				return true
			}
		}
	}
	return false
}

// hostIs reports whether the host of addr (an IP or a name) is ip.
func hostIs(ctx context.Context, addr string, ip net.IP) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if h := net.ParseIP(host); h != nil {
		return h.Equal(ip)
	}
	ctx, cancel := context.WithTimeout(ctx, peerResolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false
	}
	for _, a := range ips {
		if a.IP.Equal(ip) {
			return true
		}
	}
	return false
}
