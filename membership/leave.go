package membership

import (
	"fmt"
	"time"
)

// Leave announces Meta.Leaving, pushes that state to every live peer (a
// push/pull sync each, so peers record this node as left rather than dead),
// then broadcasts memberlist's leave message. It waits up to timeout in all;
// timeout <= 0 means Config.BroadcastTimeout. It stops the background
// rejoin. Gossip keeps running until Shutdown, which must follow. Calling it
// again is harmless.
func (m *Membership) Leave(timeout time.Duration) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return ErrShutdown
	}
	if timeout <= 0 {
		timeout = m.cfg.BroadcastTimeout
	}
	deadline := time.Now().Add(timeout)
	if !m.left {
		m.left = true
		m.cancel()
		m.announceLeaving(deadline)
	}
	// memberlist waits forever on a zero timeout: keep at least a moment.
	if err := m.list.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	m.logger.Info("left pool")
	return nil
}

// announceLeaving sets Meta.Leaving and syncs it to every live peer before
// the leave message exists. Gossip alone is best effort: a peer that missed
// the update would see the leave as a death, since memberlist does not tell
// its callbacks which of the two happened.
func (m *Membership) announceLeaving(deadline time.Time) {
	m.metaMu.Lock()
	m.meta.Leaving = true
	b, err := m.meta.Encode()
	if err == nil {
		m.metaBytes = b
	}
	m.metaMu.Unlock()
	if err != nil { // cannot happen: the meta was valid and a flag is tiny
		m.logger.Error("cannot encode leaving meta", "error", err)
		return
	}
	// Bump the local state without waiting for the broadcast (a zero
	// timeout would wait forever): the syncs below deliver it.
	_ = m.list.UpdateNode(time.Millisecond)
	var peers []string
	for _, mb := range m.Members() {
		if mb.Live() && mb.Name != m.cfg.NodeName {
			peers = append(peers, mb.Addr)
		}
	}
	done := make(chan struct{}, len(peers))
	for _, addr := range peers {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if _, err := m.list.Join([]string{addr}); err != nil {
				m.logger.Debug("leave intent sync failed", "peer", addr, "error", err)
			}
			done <- struct{}{}
		}()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for range peers {
		select {
		case <-done:
		case <-timer.C:
			m.logger.Warn("leave intent not synced to every peer in time", "peers", len(peers))
			return
		}
	}
}

// Shutdown stops gossip and every goroutine of the package, then closes the
// subscriber channels. Without a prior Leave the others detect this node as
// dead by probing. Calling it again returns nil.
func (m *Membership) Shutdown() error {
	m.lifeMu.Lock()
	if m.shutdown {
		m.lifeMu.Unlock()
		return nil
	}
	m.shutdown = true
	m.lifeMu.Unlock()

	m.cancel()
	err := m.list.Shutdown()
	m.wg.Wait()
	m.broker.close()
	m.logger.Info("gossip stopped")
	if err != nil {
		return fmt.Errorf("membership: shutdown: %w", err)
	}
	return nil
}
