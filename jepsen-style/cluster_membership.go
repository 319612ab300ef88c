package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/internal/proccluster"
	"github.com/jmcluster/jmcluster/jepsen-style/checker"
	"github.com/jmcluster/jmcluster/jepsen-style/client"
	"github.com/jmcluster/jmcluster/jepsen-style/nemesis"
	"github.com/jmcluster/jmcluster/jepsen-style/netns"
	"github.com/jmcluster/jmcluster/security"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The membership-change scenario (nemesis/membership.go): one JM cut off, removed from the
// Raft configuration from the majority side and a new JM (the topology's spare, jm4) added
// while the cut lasts; the cut heals, the removed JM runs on, is restarted with its old flags
// and data, and the final phase saves and restores a snapshot. The removed JM must never be a
// voter again, and the final checks compare the new membership.

// membershipTimeout bounds each step of a membership change (the removal, the new voter).
const membershipTimeout = 25 * time.Second

// membershipWatchEvery is how often every JM's Raft configuration is read.
const membershipWatchEvery = 500 * time.Millisecond

// membershipAfterRestore is how long the configurations are watched after the final restore.
const membershipAfterRestore = 5 * time.Second

// membershipState is what a run's membership change did, for the checker.
type membershipState struct {
	mu sync.Mutex
	checker.MembershipInput
}

func (m *membershipState) update(f func(in *checker.MembershipInput)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.MembershipInput)
}

func (m *membershipState) input() checker.MembershipInput {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := m.MembershipInput
	in.Samples = append([]checker.ConfigSample(nil), in.Samples...)
	return in
}

// spareJMs is the number of spare JobMaster namespaces the scenario needs.
func (s Scenario) spareJMs() int {
	for _, k := range s.Kinds {
		if k == nemesis.MembershipChange {
			return 1
		}
	}
	return 0
}

// operatorCLI runs `jmnode ARGS --addr NODE` inside node's namespace (with the operator
// certificate in TLS mode) and returns its output.
func (c *Cluster) operatorCLI(ctx context.Context, node string, args ...string) (string, error) {
	args = append(args, "--addr", fmt.Sprintf("%s:%d", c.topo.IP(node), PortGRPC))
	if c.creds != nil {
		f := c.creds.files(security.RoleOperator, ClientCertName)
		args = append(args, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key)
	}
	bin, err := filepath.Abs(c.jmnode)
	if err != nil {
		return "", err
	}
	out, err := c.Exec(ctx, node, bin, args...)
	if err != nil {
		return out, fmt.Errorf("jmnode %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out))
	}
	return out, nil
}

// raftVoters asks node for its Raft configuration (`jmnode raft peers --json`).
func (c *Cluster) raftVoters(ctx context.Context, node string) ([]string, error) {
	out, err := c.operatorCLI(ctx, node, "raft", "peers", "--json", "--timeout", "3s")
	if err != nil {
		return nil, err
	}
	var resp struct {
		Peers []struct {
			ID       string `json:"id"`
			Suffrage string `json:"suffrage"`
		} `json:"peers"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		return nil, fmt.Errorf("jmnode raft peers: %w: %s", err, out)
	}
	var voters []string
	for _, p := range resp.Peers {
		if p.Suffrage == "voter" {
			voters = append(voters, p.ID)
		}
	}
	return voters, nil
}

// ChangeMembership removes remove through the JMs of via (`jmnode raft remove`, retried until
// a majority-side JM leads), then starts add, the spare JM, with the join flags a user gives a
// new JobMaster (--join and --gossip-join naming the three, no --bootstrap-expect), and waits
// until it is a voter. One membership change per run.
func (c *Cluster) ChangeMembership(ctx context.Context, via []string, remove, add string) error {
	if c.memb == nil {
		return fmt.Errorf("%w: the run has no membership record", nemesis.ErrUnsupportedFault)
	}
	if in := c.memb.input(); in.Removed != "" {
		return fmt.Errorf("jepsen: one membership change per run (%s was removed already)", in.Removed)
	}
	if c.creds != nil {
		return fmt.Errorf("%w: a spare JM has no certificate in TLS mode", nemesis.ErrUnsupportedFault)
	}
	deadline := time.Now().Add(membershipTimeout)
	var last error
	for removed := false; !removed; {
		for _, v := range via {
			if _, last = c.operatorCLI(ctx, v, "raft", "remove", remove, "--timeout", "5s"); last == nil {
				removed = true
				break
			}
		}
		if !removed && (time.Now().After(deadline) || !sleepCtx(ctx, 500*time.Millisecond)) {
			return fmt.Errorf("jepsen: remove %s via %v: %w", remove, via, last)
		}
	}
	c.memb.update(func(in *checker.MembershipInput) { in.Removed, in.Added, in.RemovedAt = remove, add, time.Now() })

	p, err := c.addSpare(add)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	// Its own deadline: a JM whose gossip seeds include one it cannot reach starts serving
	// only once memberlist's join gives up on that one (10 s).
	deadline = time.Now().Add(membershipTimeout)
	for {
		voters, err := c.raftVoters(ctx, via[0])
		if err == nil && contains(voters, add) {
			c.memb.update(func(in *checker.MembershipInput) { in.AddedAt = time.Now() })
			return nil
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 500*time.Millisecond) {
			return fmt.Errorf("jepsen: %s not a voter %s after the removal (last %v, %v; see %s.log)", add, membershipTimeout, voters, err, add)
		}
	}
}

// addSpare adds the spare JM's process slot: the flags and environment of the first JM, on the
// spare's own address, data dir and log.
func (c *Cluster) addSpare(name string) (*proccluster.Proc, error) {
	if !contains(c.topo.Spares(), name) {
		return nil, fmt.Errorf("jepsen: %s is no spare JM of the topology (spares %v)", name, c.topo.Spares())
	}
	ref, err := c.procs.Get(c.topo.JMs()[0])
	if err != nil {
		return nil, err
	}
	ip, dir := c.topo.IP(name), NodeDir(c.runDir, c.topo, name)
	addr := func(port int) string { return fmt.Sprintf("%s:%d", ip, port) }
	n := proccluster.Node{Name: name, Role: proccluster.JobMaster, DataDir: filepath.Join(dir, "data"),
		Dir: filepath.Join(dir, "work"), LogPath: filepath.Join(c.runDir, name+".log"),
		Wrap:  []string{"ip", "netns", "exec", c.topo.NS(name)},
		Addrs: proccluster.Addrs{Raft: addr(PortRaft), GRPC: addr(PortGRPC), HTTP: addr(PortHTTP), Gossip: addr(PortGossip)}}
	for _, e := range ref.Env {
		if strings.HasPrefix(e, "JMNODE_FAILPOINTS_FILE=") {
			e = "JMNODE_FAILPOINTS_FILE=" + failpointsFile(c.runDir, c.topo, name)
		}
		n.Env = append(n.Env, e)
	}
	for i := 0; i < len(ref.Flags); i++ {
		f := ref.Flags[i]
		if f == "--pprof-addr" && i+1 < len(ref.Flags) {
			n.Flags = append(n.Flags, f, addr(PortPprof))
			i++
			continue
		}
		n.Flags = append(n.Flags, f)
	}
	return c.procs.AddJoiner(n)
}

// RestartRemoved kills the removed JM and starts it again with its old flags and data.
func (c *Cluster) RestartRemoved(ctx context.Context, removed string, healedAt time.Time) error {
	if c.memb != nil {
		c.memb.update(func(in *checker.MembershipInput) { in.HealAt = healedAt })
	}
	if err := c.Kill(removed); err != nil {
		return err
	}
	if err := c.Revive(ctx, removed); err != nil {
		return err
	}
	if c.memb != nil {
		c.memb.update(func(in *checker.MembershipInput) { in.RestartedAt = time.Now() })
	}
	return nil
}

// prepareSpares creates the nemesis chains in the spare JMs' namespaces (the cut names them).
func (r *run) prepareSpares(ctx context.Context) error {
	if r.scenario.spareJMs() == 0 {
		return nil
	}
	r.memb = &membershipState{}
	r.cluster.memb = r.memb
	for _, n := range r.topo.Spares() {
		for _, args := range append(nemesis.PrepareArgs(), nemesis.DelayPrepareArgs(netns.NodeDevice)...) {
			if _, err := r.cluster.Exec(ctx, n, "iptables", args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// watchMembership reads every JM's Raft configuration (the spares' too) every
// membershipWatchEvery until the returned stop is called; nothing outside the
// membership-change scenario.
func (r *run) watchMembership(ctx context.Context) (stop func()) {
	if r.memb == nil {
		return func() {}
	}
	addrs := map[string]string{}
	for _, n := range append(JMs(), r.topo.Spares()...) {
		addrs[n] = fmt.Sprintf("%s:%d", r.topo.IP(n), PortGRPC)
	}
	sec, _ := r.cluster.ClientTLS()
	pool, err := client.NewPool(addrs, netns.Dialer(r.topo.NS(ClientNode)), sec)
	if err != nil {
		r.cfg.Progress("membership: no watch: %v", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(membershipWatchEvery)
		defer t.Stop()
		for {
			r.memb.update(func(in *checker.MembershipInput) { in.Samples = append(in.Samples, readConfigs(ctx, pool)...) })
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		pool.Close()
		if r.votersPool != nil {
			r.votersPool.Close()
		}
	}
}

// readConfigs asks every JM of pool for its Raft configuration, concurrently.
func readConfigs(ctx context.Context, pool *client.Pool) []checker.ConfigSample {
	nodes := pool.Nodes()
	out := make([]checker.ConfigSample, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			defer cancel()
			resp, err := pool.Operator(n).RaftPeers(cctx, &pb.RaftPeersRequest{})
			s := checker.ConfigSample{Time: time.Now(), Node: n}
			if err != nil {
				s.Err = err.Error()
			} else {
				s.Leader = resp.GetLeaderId()
				for _, p := range resp.GetPeers() {
					if p.GetSuffrage() == "voter" {
						s.Voters = append(s.Voters, p.GetId())
					}
				}
			}
			out[i] = s
		}()
	}
	wg.Wait()
	return out
}

// voters is the run's intended Raft membership: the three JMs, or after a membership change
// the two left and the one added.
func (r *run) voters() []string {
	if r.memb == nil {
		return JMs()
	}
	in := r.memb.input()
	if in.Removed == "" || in.AddedAt.IsZero() {
		return JMs()
	}
	var out []string
	for _, n := range JMs() {
		if n != in.Removed {
			out = append(out, n)
		}
	}
	return append(out, in.Added)
}

// useVoters points the final phase's reads (state hashes, job reads) at the current voters:
// the removed JM's state is not expected to converge, the added one's is.
func (r *run) useVoters() {
	if r.memb == nil || len(r.voters()) == 0 || strings.Join(r.voters(), ",") == strings.Join(JMs(), ",") {
		return
	}
	addrs := map[string]string{}
	for _, n := range r.voters() {
		addrs[n] = fmt.Sprintf("%s:%d", r.topo.IP(n), PortGRPC)
	}
	sec, _ := r.cluster.ClientTLS()
	pool, err := client.NewPool(addrs, netns.Dialer(r.topo.NS(ClientNode)), sec)
	if err != nil {
		r.cfg.Progress("membership: final reads stay on %v: %v", JMs(), err)
		return
	}
	r.votersPool, r.pool = pool, pool
	r.cfg.Progress("membership: the final phase reads the voters %v", r.voters())
}

// finalMembership saves a snapshot of the cluster and restores it (`jmnode snapshot save`,
// `snapshot restore --force`, against a current voter), then lets the watch read every JM's
// configuration for membershipAfterRestore. It runs after the final reads, with the clients
// stopped.
func (r *run) finalMembership(ctx context.Context) {
	if r.memb == nil {
		return
	}
	p := r.cfg.Progress
	via := r.voters()[0]
	file := filepath.Join(r.dir, "membership.snap")
	r.memb.update(func(in *checker.MembershipInput) { in.RestoreAt = time.Now() })
	out, err := r.cluster.operatorCLI(ctx, via, "snapshot", "save", file, "--timeout", "20s")
	if err == nil {
		p("membership: %s", strings.TrimSpace(out))
		out, err = r.cluster.operatorCLI(ctx, via, "snapshot", "restore", file, "--force", "--wait", "60s", "--timeout", "30s")
	}
	if err != nil {
		r.memb.update(func(in *checker.MembershipInput) { in.RestoreErr = err.Error() })
		p("membership: snapshot save and restore: %v", err)
		return
	}
	r.memb.update(func(in *checker.MembershipInput) { in.RestoredAt = time.Now() })
	p("membership: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
	sleepCtx(ctx, membershipAfterRestore)
}

// membershipCheckers is the membership checker of the scenario that changes the membership.
func (r *run) membershipCheckers(rounds []checker.HashRound) []checker.Result {
	if r.memb == nil {
		return nil
	}
	in := r.memb.input()
	in.Members, in.Rounds = r.voters(), rounds
	writeJSON(filepath.Join(r.dir, "membership.json"), in)
	return []checker.Result{checker.MembershipChange(in)}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
