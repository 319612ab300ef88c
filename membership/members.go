package membership

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// Member states as reported in Member.State.
const (
	StateAlive = "alive"
	// StateSuspect is reserved: memberlist v0.6.0 never exposes suspicion
	// (see DESIGN.md), so no member is reported suspect today.
	StateSuspect = "suspect"
	StateDead    = "dead"
	StateLeft    = "left"
)

// Member is one node of the pool as this node last saw it.
type Member struct {
	Name    string // gossip node name
	Addr    string // gossip host:port
	State   string // alive, dead or left (suspect is reserved)
	Meta    Meta   // parsed metadata; the last known one for dead and left members
	MetaErr error  // why the metadata could not be parsed, if it could not
}

// Live reports whether the member is alive (or suspect, once reported).
func (m Member) Live() bool {
	return m.State == StateAlive || m.State == StateSuspect
}

// memberFromNode copies n. It must run while memberlist holds its node lock
// (inside an EventDelegate callback), since n points into memberlist's state.
func memberFromNode(n *memberlist.Node, state string) Member {
	meta, err := ParseMeta(n.Meta)
	return Member{Name: n.Name, Addr: n.Address(), State: state, Meta: meta, MetaErr: err}
}

type entry struct {
	member Member
	goneAt time.Time // when it became dead or left; zero while live
}

// tracker is this node's view of the pool, fed by memberlist callbacks
// (which memberlist serializes under its node lock). Every change is
// published while holding mu, so subscribers see events in the order the
// view changed.
type tracker struct {
	logger    hclog.Logger
	broker    *broker
	retention time.Duration // how long dead and left members are kept

	mu    sync.Mutex
	nodes map[string]*entry
}

func newTracker(logger hclog.Logger, b *broker, retention time.Duration) *tracker {
	return &tracker{logger: logger, broker: b, retention: retention, nodes: make(map[string]*entry)}
}

func (t *tracker) set(m Member, kind EventKind, now time.Time) {
	t.prune(now)
	e := t.nodes[m.Name]
	if e == nil {
		e = &entry{}
		t.nodes[m.Name] = e
	}
	e.member = m
	e.goneAt = time.Time{}
	if !m.Live() {
		e.goneAt = now
	}
	if m.MetaErr != nil {
		t.logger.Warn("member has unparsable metadata", "member", m.Name, "error", m.MetaErr)
	}
	t.logger.Debug("member event", "kind", kind.String(), "member", m.Name, "addr", m.Addr,
		"role", string(m.Meta.Role), "epoch", m.Meta.Epoch)
	t.broker.publish(Event{Kind: kind, Member: m})
}

func (t *tracker) onJoin(n *memberlist.Node) {
	m := memberFromNode(n, StateAlive)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.set(m, EventJoin, time.Now())
}

func (t *tracker) onUpdate(n *memberlist.Node) {
	m := memberFromNode(n, StateAlive)
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, known := t.nodes[m.Name]
	if !known || !prev.member.Live() {
		t.set(m, EventJoin, time.Now())
		return
	}
	t.set(m, EventUpdate, time.Now())
}

// onLeave records a node that memberlist no longer counts as live. The
// callback cannot tell a graceful leave from a failure (memberlist v0.6.0
// never fills Node.State), so a node that announced Meta.Leaving before
// going is recorded as left, any other as dead.
func (t *tracker) onLeave(n *memberlist.Node) {
	m := memberFromNode(n, StateDead)
	t.mu.Lock()
	defer t.mu.Unlock()
	if prev, ok := t.nodes[m.Name]; ok && m.MetaErr != nil && prev.member.MetaErr == nil {
		m.Meta, m.MetaErr = prev.member.Meta, nil // keep the last good metadata
	}
	kind := EventDead
	if m.Meta.Leaving {
		m.State, kind = StateLeft, EventLeave
	}
	t.set(m, kind, time.Now())
}

// prune forgets members that have been dead or left for longer than the
// retention. The caller holds mu.
func (t *tracker) prune(now time.Time) {
	for name, e := range t.nodes {
		if !e.goneAt.IsZero() && now.Sub(e.goneAt) > t.retention {
			delete(t.nodes, name)
		}
	}
}

// snapshot returns the members accepted by keep, sorted by name.
func (t *tracker) snapshot(keep func(Member) bool) []Member {
	t.mu.Lock()
	out := make([]Member, 0, len(t.nodes))
	for _, e := range t.nodes {
		if keep == nil || keep(e.member) {
			out = append(out, e.member)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}
