package taskmanager

import (
	"sync"

	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/transport"
)

// connPool shares one client connection per remote address and role (JMs, other TMs'
// DataService and PeerService); every call on them is bounded by the TM's message size limit
// both ways. With TLS, a connection accepts only a server whose certificate has the role it
// was asked for.
type connPool struct {
	maxMsg int
	tls    *security.TLS
	mu     sync.Mutex
	conns  map[connKey]*grpc.ClientConn
	closed bool
}

type connKey struct {
	addr string
	role security.Role
}

func newConnPool(maxMsg int, sec *security.TLS) *connPool {
	return &connPool{maxMsg: maxMsg, tls: sec, conns: map[connKey]*grpc.ClientConn{}}
}

// get is the connection to the JobMaster at addr.
func (p *connPool) get(addr string) (*grpc.ClientConn, error) {
	return p.dial(addr, security.RoleJobMaster)
}

// peer is the connection to the TaskManager at addr (its DataService or PeerService).
func (p *connPool) peer(addr string) (*grpc.ClientConn, error) {
	return p.dial(addr, security.RoleTaskManager)
}

func (p *connPool) dial(addr string, role security.Role) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrStopped
	}
	k := connKey{addr, role}
	if c, ok := p.conns[k]; ok {
		return c, nil
	}
	opts := append([]grpc.DialOption{transport.DialCredentials(p.tls, role)},
		transport.DialOptions(p.maxMsg, "TaskManager")...)
	if role == security.RoleJobMaster {
		opts = append(opts, transport.KeepaliveDialOption()) // a control connection: replaced when stuck
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	p.conns[k] = c
	return c, nil
}

func (p *connPool) closeAll() {
	p.mu.Lock()
	cs := p.conns
	p.conns = map[connKey]*grpc.ClientConn{}
	p.closed = true
	p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}
