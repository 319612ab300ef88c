package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		c := TestConfig()
		c.ID, c.DataDir, c.GRPCAddr = "jm1", "/tmp/x", "127.0.0.1:7000"
		return c
	}
	peers := []Peer{{ID: "jm1", RaftAddr: "127.0.0.1:1"}, {ID: "jm2", RaftAddr: "127.0.0.1:2"}}
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"test config", func(*Config) {}, true},
		{"zero timings take defaults", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout = 0, 0, 0, 0
		}, true},
		{"static peers", func(c *Config) { c.Peers = peers }, true},
		{"bootstrap expect with join", func(c *Config) { c.BootstrapExpect, c.Join = 3, []string{"a:1"} }, true},
		{"no id", func(c *Config) { c.ID = "" }, false},
		{"no data dir", func(c *Config) { c.DataDir = "" }, false},
		{"no bind", func(c *Config) { c.RaftBindAddr = "" }, false},
		{"no grpc address", func(c *Config) { c.GRPCAddr = "" }, false},
		{"negative expect", func(c *Config) { c.BootstrapExpect = -1 }, false},
		{"expect without join", func(c *Config) { c.BootstrapExpect = 3 }, false},
		{"expect and peers", func(c *Config) { c.BootstrapExpect, c.Join, c.Peers = 3, []string{"a:1"}, peers }, false},
		{"peers without self", func(c *Config) { c.Peers = peers[1:] }, false},
		{"duplicate peer", func(c *Config) { c.Peers = append(peers, peers[1]) }, false},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, false},
		{"bad advertise", func(c *Config) { c.RaftAdvertiseAddr = "nohost" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(&c)
			err := c.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

func TestNoLeaderWithinHoldTime(t *testing.T) {
	cfg := nodeConfig(t, "alone")
	cfg.ForwardHoldTime = 100 * time.Millisecond
	tn := newTestNode(t, cfg, listen(t, "127.0.0.1:0"))
	if err := tn.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tn.LeaderGRPCAddr(context.Background()); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("LeaderGRPCAddr without a cluster: %v, want ErrNoLeader", err)
	}
	if _, _, err := tn.LeaderConn(context.Background()); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("LeaderConn without a cluster: %v, want ErrNoLeader", err)
	}
	if _, err := applyValue(context.Background(), tn.Node, "v"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("apply without a cluster: %v, want ErrNotLeader", err)
	}
	if _, err := tn.AddVoter("x", "127.0.0.1:1", ""); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("AddVoter without a cluster: %v, want ErrNotLeader", err)
	}
}
