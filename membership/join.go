package membership

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"time"
)

// others drops this node's own address from addrs: joining oneself would
// count as a successful join and stop the rejoin loop.
func (m *Membership) others(addrs []string) []string {
	bindHost, _, _ := splitHostPort(m.cfg.BindAddr)
	_, port, _ := net.SplitHostPort(m.addr)
	self := map[string]bool{m.addr: true, net.JoinHostPort(bindHost, port): true}
	var out []string
	for _, a := range addrs {
		if !self[a] {
			out = append(out, a)
		}
	}
	return out
}

// Join contacts the given host:port addresses and merges state with them. It
// returns how many answered; an error only if none did. Addresses of this
// node itself are skipped, so a list of only itself returns (0, nil).
func (m *Membership) Join(addrs []string) (int, error) {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if err := m.usable(); err != nil {
		return 0, err
	}
	peers := m.others(addrs)
	if len(peers) == 0 {
		return 0, nil
	}
	n, err := m.list.Join(peers)
	if err != nil {
		return n, fmt.Errorf("%w: %v", ErrNoPeers, err)
	}
	m.logger.Info("joined pool", "contacted", n)
	return n, nil
}

func (m *Membership) rejoinLoop(ctx context.Context, peers []string) {
	defer m.wg.Done()
	delay := m.cfg.RejoinMin
	for attempt := 1; ; attempt++ {
		wait := delay/2 + rand.N(delay/2+1) // jitter in [delay/2, delay]
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		n, err := m.list.Join(peers)
		if err == nil {
			m.logger.Info("joined pool", "contacted", n, "attempts", attempt)
			return
		}
		if ctx.Err() != nil {
			return
		}
		delay = min(delay*2, m.cfg.RejoinMax)
		m.logger.Warn("join retry failed", "attempt", attempt, "next_in", delay, "error", err)
	}
}
