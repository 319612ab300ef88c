package membership

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/jmcluster/jmcluster/internal/setting"
)

// Timing profiles for Config.Profile.
const (
	ProfileLAN   = "lan"   // memberlist.DefaultLANConfig
	ProfileLocal = "local" // memberlist.DefaultLocalConfig
	ProfileTest  = "test"  // fast timings for tests on loopback
)

// Config configures a Membership. Zero values mean the default.
type Config struct {
	// NodeName is the unique gossip name of this node. Default: Meta.ID.
	NodeName string
	// BindAddr is the host:port gossip listens on, TCP and UDP. Port 0 picks
	// a port free for both protocols.
	BindAddr string
	// AdvertiseAddr is the host[:port] peers use to reach this node.
	// Default: the bound address (memberlist picks a private IP when the
	// host is unspecified). Without a port the bound port is used.
	AdvertiseAddr string
	// Join lists host:port addresses of existing members. If none answers
	// at start, New keeps retrying in the background until one does.
	Join []string
	// SecretKey, when set, encrypts all gossip with AES (16, 24 or 32 bytes): the keyring's
	// primary key. Every member of the pool must hold it (keyring.go).
	SecretKey []byte
	// Keys are more keys this node decrypts gossip with (a rotation under way); they need
	// SecretKey.
	Keys [][]byte
	// KeyringFile, when set, holds the keyring across restarts: read at start when it exists
	// (it then wins over SecretKey and Keys, since it holds the last rotation), written when it
	// does not, and rewritten before every keyring change takes effect.
	KeyringFile string
	// Meta is what this node gossips about itself.
	Meta Meta
	// Logger receives the package's and memberlist's logs. Default: null.
	Logger hclog.Logger
	// Profile selects memberlist timings: "lan" (default), "local" or "test".
	Profile string
	// RejoinMin and RejoinMax bound the jittered exponential backoff of the
	// background rejoin loop. Default: by profile.
	RejoinMin, RejoinMax time.Duration
	// BroadcastTimeout bounds how long UpdateMeta waits for its broadcast
	// to go out. Default: by profile.
	BroadcastTimeout time.Duration
	// GoneRetention is how long a dead or left member stays in Members()
	// after memberlist reported it gone. Default: 1h.
	GoneRetention time.Duration
}

// DefaultConfig returns a production configuration: LAN timings on port 7946.
func DefaultConfig() Config {
	return Config{
		BindAddr: "0.0.0.0:7946",
		Profile:  ProfileLAN,
	}
}

// TestConfig returns a configuration for tests: a free port on 127.0.0.1 and
// fast timings.
func TestConfig(meta Meta) Config {
	return Config{
		BindAddr: "127.0.0.1:0",
		Profile:  ProfileTest,
		Meta:     meta,
	}
}

// Validate reports the first problem of c, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if _, _, err := splitHostPort(c.withDefaults().BindAddr); err != nil {
		return setting.New(ErrInvalidConfig, "BindAddr", c.BindAddr, "must be host:port (%v)", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPortOptional(c.AdvertiseAddr); err != nil {
			return setting.New(ErrInvalidConfig, "AdvertiseAddr", c.AdvertiseAddr, "must be host or host:port (%v)", err)
		}
	}
	for _, j := range c.Join {
		if _, _, err := splitHostPortOptional(j); err != nil {
			return setting.New(ErrInvalidConfig, "Join", j, "must be host or host:port (%v)", err)
		}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return bad("secret key must be 16, 24 or 32 bytes, got %d", len(c.SecretKey))
	}
	for i, k := range c.Keys {
		if err := ValidateKey(k); err != nil {
			return bad("key %d: %v", i, err)
		}
	}
	if len(c.Keys) > 0 && len(c.SecretKey) == 0 {
		return bad("keys need a secret key (the primary)")
	}
	switch c.Profile {
	case "", ProfileLAN, ProfileLocal, ProfileTest:
	default:
		return setting.New(ErrInvalidConfig, "Profile", c.Profile, "must be %s, %s or %s", ProfileLAN, ProfileLocal, ProfileTest)
	}
	if c.RejoinMin < 0 || c.RejoinMax < 0 || c.BroadcastTimeout < 0 || c.GoneRetention < 0 {
		return bad("durations must not be negative")
	}
	if c.RejoinMin > 0 && c.RejoinMax > 0 && c.RejoinMin > c.RejoinMax {
		return bad("rejoin min %s above max %s", c.RejoinMin, c.RejoinMax)
	}
	if _, err := c.Meta.Encode(); err != nil {
		return bad("meta: %v", err)
	}
	return nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.NodeName == "" {
		c.NodeName = c.Meta.ID
	}
	if c.BindAddr == "" {
		c.BindAddr = DefaultConfig().BindAddr
	}
	if c.Profile == "" {
		c.Profile = ProfileLAN
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	fast := c.Profile == ProfileTest
	if c.RejoinMin == 0 {
		c.RejoinMin = pick(fast, 50*time.Millisecond, time.Second)
	}
	if c.RejoinMax == 0 {
		c.RejoinMax = pick(fast, time.Second, 30*time.Second)
	}
	if c.RejoinMin > c.RejoinMax {
		c.RejoinMin = c.RejoinMax
	}
	if c.BroadcastTimeout == 0 {
		c.BroadcastTimeout = pick(fast, 2*time.Second, 5*time.Second)
	}
	if c.GoneRetention == 0 {
		c.GoneRetention = time.Hour
	}
	return c
}

func pick(fast bool, a, b time.Duration) time.Duration {
	if fast {
		return a
	}
	return b
}

// profileConfig returns the memberlist timings of a profile.
func profileConfig(profile string) *memberlist.Config {
	switch profile {
	case ProfileLocal:
		return memberlist.DefaultLocalConfig()
	case ProfileTest:
		mc := memberlist.DefaultLocalConfig()
		// Fast, but not so fast that a test process under -race on a busy two-core machine
		// misses probes: with a 50 ms probe timeout live members were marked dead every run.
		mc.ProbeInterval = 200 * time.Millisecond
		mc.ProbeTimeout = 150 * time.Millisecond
		mc.GossipInterval = 20 * time.Millisecond
		mc.SuspicionMult = 3
		mc.PushPullInterval = time.Second
		mc.TCPTimeout = time.Second
		mc.GossipToTheDeadTime = 2 * time.Second
		mc.DeadNodeReclaimTime = 500 * time.Millisecond
		return mc
	default:
		return memberlist.DefaultLANConfig()
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// splitHostPortOptional accepts "host" or "host:port"; a missing port is 0.
func splitHostPortOptional(addr string) (string, int, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		if net.ParseIP(addr) != nil || !strings.Contains(addr, ":") {
			return addr, 0, nil
		}
		return "", 0, err
	}
	return splitHostPort(addr)
}
