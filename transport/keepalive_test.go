package transport_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/transport"
)

// stallProxy forwards TCP connections to a server until stall: from then on the connections
// it holds deliver nothing either way (as when a network drops their packets and TCP backs off
// its retransmissions), while new ones are forwarded as before.
type stallProxy struct {
	l      net.Listener
	target string

	mu       sync.Mutex
	accepted int
	stalled  map[int]bool // connection number -> stalled
	conns    []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{l: l, target: target, stalled: map[int]bool{}}
	t.Cleanup(func() {
		_ = l.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	go p.serve()
	return p
}

func (p *stallProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.accepted++
		n := p.accepted
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(n, c, s)
		go p.pipe(n, s, c)
	}
}

// pipe copies src to dst while connection n is not stalled; a stalled connection's bytes are
// read (so the sender's TCP is not what stops) and never delivered.
func (p *stallProxy) pipe(n int, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			p.mu.Lock()
			stalled := p.stalled[n]
			p.mu.Unlock()
			if !stalled {
				if _, werr := dst.Write(buf[:k]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}

// stall stalls every connection accepted so far.
func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := 1; n <= p.accepted; n++ {
		p.stalled[n] = true
	}
}

func (p *stallProxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// TestServersAcceptTheKeepalivePings: a server built with ServerOptions lets a client with
// KeepaliveDialOption ping on a stream that stays silent (no data either way) for longer than
// three ping intervals; gRPC's default policy would have closed it with GOAWAY too_many_pings
// after the third.
func TestServersAcceptTheKeepalivePings(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps a silent stream open for four keepalive intervals (40 s)")
	}
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(transport.ServerOptions(0)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), transport.KeepaliveDialOption()},
		transport.DialOptions(0, "test")...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	open := 4*transport.KeepaliveTime + transport.KeepaliveTimeout
	ctx, cancel := context.WithTimeout(context.Background(), open)
	defer cancel()
	// Watch sends the service's status once and then nothing while it does not change.
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first status: %v", err)
	}
	started := time.Now()
	_, err = w.Recv()
	// At the deadline either side may end the stream first: the client with DeadlineExceeded,
	// or the server, which got the deadline as grpc-timeout, with a reset the client reads as
	// Canceled. Either is fine once the deadline has passed; an end before it is the failure.
	if deadline, _ := ctx.Deadline(); time.Now().Before(deadline) {
		t.Fatalf("the silent stream ended %v after its first message, %v before its deadline, with %v",
			time.Since(started).Round(time.Millisecond), time.Until(deadline).Round(time.Millisecond), err)
	}
	if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Canceled {
		t.Fatalf("the silent stream ended at its deadline with %v, want DeadlineExceeded or Canceled", err)
	}
}

// TestStalledConnectionIsReplaced: a client connection whose server stops answering (its
// packets dropped, nothing closed) is replaced by a new one within KeepaliveTime +
// KeepaliveTimeout of its last answer, so calls work again once the network does; without
// keepalive every call on it would time out for as long as TCP's backoff lasts.
func TestStalledConnectionIsReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a keepalive timeout (13 s)")
	}
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(transport.ServerOptions(0)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	p := newStallProxy(t, l.Addr().String())
	conn, err := grpc.NewClient(p.l.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), transport.KeepaliveDialOption()},
		transport.DialOptions(0, "test")...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)
	check := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(10 * time.Second); err != nil {
		t.Fatalf("first call: %v", err)
	}
	lastAnswer := time.Now()
	p.stall()

	// Calls one after another, each with a short deadline, as a TaskManager heartbeats: one is
	// always open, so the client keeps probing the stalled connection.
	bound := transport.KeepaliveTime + transport.KeepaliveTimeout + 2*transport.ReconnectMaxDelay + time.Second
	deadline := lastAnswer.Add(2 * bound)
	var last error
	for {
		last = check(time.Second)
		if last == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call succeeded %v after the connection stalled (bound %v); last error: %v; connections: %d",
				time.Since(lastAnswer).Round(time.Millisecond), bound, last, p.connections())
		}
	}
	took := time.Since(lastAnswer)
	if n := p.connections(); n < 2 {
		t.Fatalf("a call succeeded on the stalled connection (connections %d)", n)
	}
	if took > bound {
		t.Fatalf("the stalled connection was replaced %v after its last answer, over KeepaliveTime + KeepaliveTimeout + two reconnect delays + 1 s = %v",
			took.Round(time.Millisecond), bound)
	}
	t.Logf("replaced %v after the last answer (keepalive %v + %v)", took.Round(time.Millisecond), transport.KeepaliveTime, transport.KeepaliveTimeout)
}
