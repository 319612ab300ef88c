package membership

import "github.com/hashicorp/memberlist"

// delegate serves the local metadata to memberlist. The package carries no
// user messages or push/pull state: the metadata is the whole payload.
type delegate struct{ m *Membership }

var _ memberlist.Delegate = delegate{}

// NodeMeta returns the encoded local metadata, which Encode keeps within limit.
func (d delegate) NodeMeta(limit int) []byte {
	b := d.m.localMetaBytes()
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg ignores user messages.
func (delegate) NotifyMsg([]byte) {}

// GetBroadcasts has nothing to broadcast.
func (delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState has no state to push.
func (delegate) LocalState(bool) []byte { return nil }

// MergeRemoteState has no state to merge.
func (delegate) MergeRemoteState([]byte, bool) {}

// events feeds memberlist's callbacks into the tracker. memberlist calls it
// with its node lock held: it must not call back into memberlist, and never
// blocks (the broker drops for full subscribers).
type events struct{ t *tracker }

var _ memberlist.EventDelegate = events{}

// NotifyJoin records a joining (or returning) node.
func (e events) NotifyJoin(n *memberlist.Node) { e.t.onJoin(n) }

// NotifyLeave records a dead (failure detected) or left (graceful) node.
func (e events) NotifyLeave(n *memberlist.Node) { e.t.onLeave(n) }

// NotifyUpdate records new metadata.
func (e events) NotifyUpdate(n *memberlist.Node) { e.t.onUpdate(n) }
