package jobmaster

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/jmcluster/jmcluster/transport"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The registry's connections to TaskManagers: one cached gRPC client per address, watched so a
// broken connection is noted (a reason to probe the TM, liveness.go), and a record of the calls
// to each address that the isolation rule reads (CallContact).

// callRecord is what the isolation rule needs of this JobMaster's calls to one TM address: how
// many are in flight, and when the last one ended (answered or not).
type callRecord struct {
	inFlight int
	lastEnd  time.Time
}

// callBegins and callEnds bracket every call to the TM at addr (Call, Stream).
func (r *Registry) callBegins(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[addr]
	c.inFlight++
	r.calls[addr] = c
}

func (r *Registry) callEnds(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[addr]
	c.inFlight--
	c.lastEnd = time.Now()
	r.calls[addr] = c
}

// CallContact says when the last call of this JobMaster to the TM at addr ended (answered,
// refused or timed out; zero: none) and whether one is in flight now. A TM counts any call it
// accepts from a leader as contact, and a call reaches the TM before it ends or not at all, so
// the TM's last contact by this JobMaster's calls is no later than this (isolation.go).
func (r *Registry) CallContact(addr string) (lastEnd time.Time, inFlight bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[addr]
	return c.lastEnd, c.inFlight > 0
}

// Client returns a TaskManagerService client for a TM address.
func (r *Registry) Client(addr string) (pb.TaskManagerServiceClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cc := r.conns[addr]
	if cc == nil {
		var err error
		opts := append([]grpc.DialOption{transport.DialCredentials(r.tls, transport.RoleTaskManager)}, transport.DialOptions(r.maxMsg, "JobMaster")...)
		opts = append(opts, transport.KeepaliveDialOption()) // a control connection: replaced when stuck
		cc, err = grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, err
		}
		r.conns[addr] = cc
		go r.watch(addr, cc)
	}
	return pb.NewTaskManagerServiceClient(cc), nil
}

// watch follows a connection until it is closed: when a connection that was connecting or
// ready falls back (IDLE or TRANSIENT_FAILURE: the TM's process ended and its kernel closed the
// socket or refused the dial, or the network cut it), the TM at that address becomes worth
// probing at once, as after a failed call — the leader need not wait for a call or a late
// heartbeat to start counting refusals (liveness.go). A fall back seen from CONNECTING counts
// too: the watcher may not have run while the connection was READY (on a loaded machine it
// missed that state entirely). A fall back of a live TM's connection costs one probe that
// connects.
func (r *Registry) watch(addr string, cc *grpc.ClientConn) {
	state := cc.GetState()
	for state != connectivity.Shutdown {
		if !cc.WaitForStateChange(context.Background(), state) {
			return
		}
		next := cc.GetState()
		was := state == connectivity.Ready || state == connectivity.Connecting
		if was && (next == connectivity.Idle || next == connectivity.TransientFailure) {
			r.noteBroken(addr)
		}
		state = next
	}
}

// noteBroken records that the connection to the TM at addr broke.
func (r *Registry) noteBroken(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tm := range r.tms {
		if tm.GRPCAddr == addr {
			tm.CallFailedAt = time.Now()
		}
	}
}

// Forget drops a cached connection (after the TM at that address died).
func (r *Registry) Forget(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cc := r.conns[addr]; cc != nil {
		_ = cc.Close()
		delete(r.conns, addr)
	}
}

// Call runs fn against the TM at addr with the registry's RPC timeout.
func (r *Registry) Call(ctx context.Context, addr string, fn func(context.Context, pb.TaskManagerServiceClient) error) error {
	c, err := r.Client(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	r.callBegins(addr)
	err = fn(ctx, c)
	r.callEnds(addr)
	r.noteCall(ctx, addr, err)
	return err
}

// noteCall records a failed call to the TM at addr (a reason for the leader to probe it:
// liveness.go). A call cancelled by its caller or refused by the TM's logic says nothing.
func (r *Registry) noteCall(ctx context.Context, addr string, err error) {
	if err == nil || errors.Is(ctx.Err(), context.Canceled) || !callFailed(err) {
		return
	}
	r.noteBroken(addr)
}

func (r *Registry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, cc := range r.conns {
		_ = cc.Close()
		delete(r.conns, addr)
	}
}

// Stream runs fn against the TM at addr for a streamed call (a report) with its own deadline:
// timeout bounds the whole stream, however many messages it carries; 0 leaves it to ctx.
func (r *Registry) Stream(ctx context.Context, addr string, timeout time.Duration, fn func(context.Context, pb.TaskManagerServiceClient) error) error {
	c, err := r.Client(addr)
	if err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	r.callBegins(addr)
	err = fn(ctx, c)
	r.callEnds(addr)
	r.noteCall(ctx, addr, err)
	return err
}
