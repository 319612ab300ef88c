package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/jmcluster/jmcluster/security"
)

// tlsStreamLayer is hashicorp/raft's StreamLayer over mutual TLS (as rqlite's and Nomad's
// TLS stream layers): the listener accepts only a peer whose certificate chains to the CA and
// has the jobmaster role, and a dial accepts only such a server, for the host it dialled. So a
// plaintext node, a node of another CA, a TaskManager's or an operator's certificate cannot
// send Raft RPCs (vote, append entries, install a snapshot) nor receive them. The certificate
// and CA are read again from disk when they change (security.TLS).
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// newTLSTransport is raft.NewTCPTransportWithConfig with the TLS stream layer.
func newTLSTransport(bindAddr string, advertise net.Addr, sec *security.TLS, cfg *raft.NetworkTransportConfig) (*raft.NetworkTransport, error) {
	l, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, err
	}
	s := &tlsStreamLayer{
		Listener:  tls.NewListener(l, sec.ServerConfig(security.RoleJobMaster)),
		advertise: advertise,
		client:    sec.ClientConfig(security.RoleJobMaster),
	}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		_ = l.Close()
		return nil, fmt.Errorf("raft address %s is not advertisable (set --raft-advertise)", s.Addr())
	}
	cfg.Stream = s
	return raft.NewNetworkTransportWithConfig(cfg), nil
}

// Dial connects to a peer and completes the handshake within timeout, so a refused peer fails
// the dial rather than the first RPC's read.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, err
	}
	cfg := s.client.Clone()
	cfg.ServerName = host
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	return d.DialContext(ctx, "tcp", string(address))
}

// Addr is the advertised address (the bound one when none is set).
func (s *tlsStreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}
