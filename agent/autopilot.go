package agent

import (
	"context"
	"time"
)

// Dead-server cleanup (Consul's autopilot CleanupDeadServers, narrowed): with
// JobMasterConfig.CleanupDeadServers > 0, the established leader removes from the Raft
// configuration a voter that gossip has reported dead or left for that long, one at a time,
// and only while at least MinQuorum voters remain. A JobMaster gossip never knew is not
// removed (unknown is not dead), nor is this node. Off by default: removing a voter is an
// operator's decision unless they ask for it (docs/operations.md).

// autopilotTick is how often the leader looks for dead servers.
const autopilotTick = time.Second

func (a *JobMaster) cleanupDeadServers(ctx context.Context) {
	after, minQuorum := a.cfg.CleanupDeadServers, max(a.cfg.MinQuorum, 1)
	goneSince := map[string]time.Time{}
	kept := map[string]bool{} // dead servers logged as kept for the minimum quorum
	tick := time.NewTicker(autopilotTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		gone := map[string]bool{}
		for _, m := range a.Gossip.Members() {
			if m.MetaErr != nil || m.Meta.Role != "jobmaster" || m.Live() {
				continue
			}
			gone[m.Meta.ID] = true
			if _, ok := goneSince[m.Meta.ID]; !ok {
				goneSince[m.Meta.ID] = now
			}
		}
		for id := range goneSince {
			if !gone[id] {
				delete(goneSince, id)
				delete(kept, id)
			}
		}
		if !a.Node.Established() {
			continue
		}
		peers, err := a.Node.Peers()
		if err != nil {
			continue
		}
		voters := 0
		for _, p := range peers {
			if p.Suffrage == "voter" {
				voters++
			}
		}
		for _, p := range peers {
			since, ok := goneSince[p.Id]
			if !ok || p.Suffrage != "voter" || p.Id == a.Node.ID() || now.Sub(since) < after {
				continue
			}
			if voters-1 < minQuorum {
				if !kept[p.Id] {
					kept[p.Id] = true
					a.log.Info("dead server kept: removing it would leave fewer voters than the minimum quorum", "server", p.Id, "voters", voters, "min_quorum", minQuorum)
				}
				break
			}
			idx, err := a.Node.RemoveServer(p.Id)
			if err != nil {
				a.log.Warn("dead server cleanup: remove failed", "server", p.Id, "error", err)
				break
			}
			a.log.Info("dead server removed from the Raft configuration", "server", p.Id, "gone_for", now.Sub(since).Round(time.Millisecond), "voters_left", voters-1, "index", idx)
			delete(goneSince, p.Id)
			break // one at a time
		}
	}
}
