// Package membership is the gossip layer: every JobMaster and TaskManager
// joins one hashicorp/memberlist pool and gossips its Meta (role, addresses,
// slots, leader epoch). Other packages read the pool through Members and
// react to Subscribe events; only this package touches memberlist.
package membership

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/jmcluster/jmcluster/internal/logsum"
)

// Membership is this node's seat in the gossip pool.
type Membership struct {
	cfg     Config
	logger  hclog.Logger
	list    *memberlist.Memberlist
	addr    string // advertised gossip host:port
	tracker *tracker
	broker  *broker

	// keyring is memberlist's gossip keyring, nil when gossip is not encrypted; keyMu
	// serializes its changes and the keyring file's writes (keyring.go).
	keyring *memberlist.Keyring
	keyMu   sync.Mutex

	metaMu    sync.Mutex
	meta      Meta
	metaBytes []byte

	// updateNode is m.list.UpdateNode (a test stands in for it to lose a broadcast's notice),
	// and broadcastRound how long setMeta waits on one call of it (setMeta explains).
	updateNode     func(timeout time.Duration) error
	broadcastRound time.Duration

	// lifeMu serializes Join, UpdateMeta, Leave and Shutdown.
	lifeMu   sync.Mutex
	left     bool
	shutdown bool

	cancel context.CancelFunc // stops the rejoin loop; called by Leave and Shutdown
	wg     sync.WaitGroup
}

// New starts gossip on cfg.BindAddr and joins cfg.Join. If no join address
// answers, New still succeeds and keeps trying in the background with
// jittered backoff until a join succeeds, Leave or Shutdown.
func New(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	metaBytes, err := cfg.Meta.Encode()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger.Named("membership").With("node", cfg.NodeName)
	b := newBroker(logger)
	m := &Membership{
		cfg:       cfg,
		logger:    logger,
		broker:    b,
		tracker:   newTracker(logger, b, cfg.GoneRetention),
		meta:      cfg.Meta,
		metaBytes: metaBytes,
	}
	st, err := cfg.initialKeyring()
	if err != nil {
		return nil, err
	}
	if m.keyring, err = newMemberlistKeyring(st); err != nil {
		return nil, fmt.Errorf("%w: gossip keyring: %v", ErrInvalidConfig, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel

	if err := m.create(); err != nil {
		m.cancel()
		return nil, err
	}
	m.addr = m.list.LocalNode().Address() // no peer yet: nothing writes it concurrently
	logger.Info("gossip started", "addr", m.addr, "role", string(cfg.Meta.Role), "profile", cfg.Profile, "encrypted", m.keyring != nil)

	if peers := m.others(cfg.Join); len(peers) > 0 {
		n, err := m.list.Join(peers)
		if err == nil {
			logger.Info("joined pool", "contacted", n)
		} else {
			logger.Warn("initial join failed, retrying in background", "peers", len(peers), "first", logsum.List(peers), "error", err)
			m.wg.Add(1)
			go m.rejoinLoop(ctx, peers)
		}
	}
	return m, nil
}

// create builds the memberlist, retrying when an automatically chosen port
// was taken between the probe and the bind.
func (m *Membership) create() error {
	host, port, _ := splitHostPort(m.cfg.BindAddr)
	auto := port == 0
	var lastErr error
	for range 5 {
		if auto {
			p, err := freePort(host)
			if err != nil {
				return err
			}
			port = p
		}
		mc, err := m.memberlistConfig(host, port)
		if err != nil {
			return err
		}
		list, err := memberlist.Create(mc)
		if err == nil {
			m.list = list
			m.updateNode = list.UpdateNode
			m.broadcastRound = max(10*mc.GossipInterval, 100*time.Millisecond)
			return nil
		}
		lastErr = err
		if !auto || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return fmt.Errorf("membership: start gossip on %s: %w", m.cfg.BindAddr, lastErr)
}

func (m *Membership) memberlistConfig(host string, port int) (*memberlist.Config, error) {
	mc := profileConfig(m.cfg.Profile)
	mc.Name = m.cfg.NodeName
	mc.BindAddr = host
	mc.BindPort = port
	mc.AdvertisePort = port
	if m.cfg.AdvertiseAddr != "" {
		ahost, aport, err := splitHostPortOptional(m.cfg.AdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("%w: advertise address: %v", ErrInvalidConfig, err)
		}
		mc.AdvertiseAddr = ahost
		if aport != 0 {
			mc.AdvertisePort = aport
		}
	}
	if m.keyring != nil {
		// Encrypted, and nothing unencrypted is read or sent (memberlist's defaults, kept).
		mc.Keyring = m.keyring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Delegate = delegate{m: m}
	mc.Events = events{t: m.tracker}
	mc.Logger = m.logger.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	return mc, nil
}

func (m *Membership) usable() error {
	switch {
	case m.shutdown:
		return ErrShutdown
	case m.left:
		return ErrLeft
	}
	return nil
}

// Name returns this node's gossip name.
func (m *Membership) Name() string { return m.cfg.NodeName }

// Addr returns the gossip host:port other nodes join.
func (m *Membership) Addr() string { return m.addr }

// Members returns every member this node knows, itself included, sorted by
// name: live ones, and dead or left ones with their last metadata until they
// come back or Config.GoneRetention passes.
func (m *Membership) Members() []Member { return m.tracker.snapshot(nil) }

// TaskManagers returns the live TaskManagers, by name, leaving ones included.
func (m *Membership) TaskManagers() []Member { return m.liveRole(RoleTaskManager) }

// JobMasters returns the live JobMasters, by name, leaving ones included.
func (m *Membership) JobMasters() []Member { return m.liveRole(RoleJobMaster) }

func (m *Membership) liveRole(r Role) []Member {
	return m.tracker.snapshot(func(mb Member) bool {
		return mb.Live() && mb.MetaErr == nil && mb.Meta.Role == r
	})
}

// LocalMeta returns the metadata this node gossips.
func (m *Membership) LocalMeta() Meta {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	return m.meta
}

func (m *Membership) localMetaBytes() []byte {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	return m.metaBytes
}

// UpdateMeta changes the local metadata with fn and broadcasts it. If fn
// leaves a Meta that cannot be encoded, nothing changes and the error is
// returned. If the broadcast does not go out within Config.BroadcastTimeout
// the new metadata stays in force (push/pull spreads it) and an error says so.
func (m *Membership) UpdateMeta(fn func(*Meta)) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	return m.setMeta(fn, m.cfg.BroadcastTimeout)
}

// setMeta applies fn to the local metadata and broadcasts it. The caller
// holds lifeMu, which keeps updates in incarnation order.
//
// memberlist's UpdateNode queues the alive message, then waits for the
// queue's notice that it went out; the notice is a non-blocking send on an
// unbuffered channel (memberlistBroadcast.Finished), so a broadcast that goes
// out before UpdateNode starts to wait is never reported, and UpdateNode
// times out although every peer has the update (seen under -race on a loaded
// machine: 1 of 300 updates waited its whole 1 s timeout while all six
// members already held the new metadata; every other update took under
// 200 ms). So setMeta waits in rounds of ten gossip intervals: a round that
// ends without the notice broadcasts the metadata again (a new incarnation,
// which replaces the queued message; peers see no change of metadata), so a
// lost notice costs one round, and a broadcast that really does not go out
// still fails at timeout.
func (m *Membership) setMeta(fn func(*Meta), timeout time.Duration) error {
	m.metaMu.Lock()
	next := m.meta
	fn(&next)
	b, err := next.Encode()
	if err != nil {
		m.metaMu.Unlock()
		return fmt.Errorf("update meta: %w", err)
	}
	m.meta, m.metaBytes = next, b
	m.metaMu.Unlock()
	deadline := time.Now().Add(timeout)
	rounds := 0
	// UpdateNode waits without end for a timeout <= 0: wait is always above 0.
	for wait := timeout; wait > 0; wait = time.Until(deadline) {
		rounds++
		if err = m.updateNode(min(m.broadcastRound, wait)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("update meta: broadcast not confirmed within %s (membership BroadcastTimeout; %d broadcasts): %w", timeout, rounds, err)
}

// Subscribe returns a channel of membership events, the local node's
// included, and a func that unsubscribes and closes it. A subscriber whose
// buffer is full loses events (see Dropped); it can always resync from
// Members. Shutdown closes every channel.
func (m *Membership) Subscribe(buffer int) (<-chan Event, func()) {
	return m.broker.subscribe(buffer)
}

// Dropped returns how many events were dropped for full subscribers.
func (m *Membership) Dropped() uint64 { return m.broker.dropped.Load() }

// String helps logs: name@addr.
func (m *Membership) String() string {
	return m.cfg.NodeName + "@" + m.addr
}
