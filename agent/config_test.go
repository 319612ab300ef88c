package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/cluster"
	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/jobmaster"
	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/taskmanager"
)

// TestConfigValidateNamesTheSection: the assembly's Validate refuses with each package's rule,
// its field within the section that holds it and its kind kept, then with its own fields'.
func TestConfigValidateNamesTheSection(t *testing.T) {
	jm := func(edit func(*JobMasterConfig)) JobMasterConfig {
		c := JobMasterConfig{Cluster: cluster.TestConfig(), GRPCAddr: "127.0.0.1:0"}
		c.Cluster.ID, c.Cluster.DataDir, c.Cluster.RaftBindAddr = "jm1", t.TempDir(), "127.0.0.1:0"
		edit(&c)
		return c
	}
	gossip := membership.TestConfig(membership.Meta{})
	for _, tc := range []struct {
		name  string
		cfg   JobMasterConfig
		field string
		kind  error
	}{
		{"valid", jm(func(*JobMasterConfig) {}), "", nil},
		{"cluster", jm(func(c *JobMasterConfig) { c.Cluster.ID = "" }), "Cluster.ID", cluster.ErrInvalidConfig},
		{"jobmaster", jm(func(c *JobMasterConfig) { c.JobMaster.FenceTimeout = -time.Second }), "JobMaster.FenceTimeout", jobmaster.ErrInvalidConfig},
		{"gossip", jm(func(c *JobMasterConfig) { g := gossip; g.Profile = "wan"; c.Gossip = &g }), "Gossip.Profile", membership.ErrInvalidConfig},
		{"grpc", jm(func(c *JobMasterConfig) { c.GRPCAddr = "nowhere" }), "GRPCAddr", ErrInvalidConfig},
		{"cleanup without gossip", jm(func(c *JobMasterConfig) { c.CleanupDeadServers = time.Minute }), "CleanupDeadServers", ErrInvalidConfig},
		{"cleanup with gossip", jm(func(c *JobMasterConfig) { g := gossip; c.Gossip, c.CleanupDeadServers = &g, time.Minute }), "", nil},
	} {
		checkRefusal(t, tc.name, tc.cfg.Validate(), tc.field, tc.kind)
	}
	tm := TaskManagerConfig{TM: taskmanager.DefaultConfig()}
	tm.TM.ID = "tm1"
	checkRefusal(t, "tm valid", tm.Validate(), "", nil)
	tm.TM.Slots = 2000
	checkRefusal(t, "tm slots", tm.Validate(), "TM.Slots", taskmanager.ErrInvalidConfig)
	if tm.TM.Slots != 2000 || tm.TM.Logger != nil {
		t.Fatal("Validate changed the configuration it checked")
	}
}

func checkRefusal(t *testing.T, name string, err error, field string, kind error) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		return
	}
	var e *setting.Error
	if !errors.As(err, &e) || e.Field != field || !errors.Is(err, kind) || !strings.Contains(err.Error(), field) {
		t.Errorf("%s: got %v, want a refusal of %s of kind %v", name, err, field, kind)
	}
}
