package taskmanager

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jmcluster/jmcluster/transport"
)

// connPool shares one client connection per remote address (JMs and other TMs' DataService);
// every call on them is bounded by the TM's message size limit both ways.
type connPool struct {
	maxMsg int
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newConnPool(maxMsg int) *connPool {
	return &connPool{maxMsg: maxMsg, conns: map[string]*grpc.ClientConn{}}
}

func (p *connPool) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrStopped
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		transport.DialOptions(p.maxMsg, "TaskManager")...)
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *connPool) closeAll() {
	p.mu.Lock()
	cs := p.conns
	p.conns = map[string]*grpc.ClientConn{}
	p.closed = true
	p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}
