package membership

import (
	"errors"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.Meta = jm("jm-1")
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("default config with meta: %v", err)
	}
	if err := TestConfig(tm("tm-1", 2)).Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	cases := []struct {
		name string
		edit func(*Config)
	}{
		{"bind without port", func(c *Config) { c.BindAddr = "127.0.0.1" }},
		{"bind bad port", func(c *Config) { c.BindAddr = "127.0.0.1:http" }},
		{"bind port too high", func(c *Config) { c.BindAddr = "127.0.0.1:70000" }},
		{"advertise bad", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:x:y" }},
		{"key 15 bytes", func(c *Config) { c.SecretKey = make([]byte, 15) }},
		{"key 33 bytes", func(c *Config) { c.SecretKey = make([]byte, 33) }},
		{"unknown profile", func(c *Config) { c.Profile = "wan" }},
		{"negative duration", func(c *Config) { c.BroadcastTimeout = -time.Second }},
		{"rejoin min above max", func(c *Config) { c.RejoinMin, c.RejoinMax = 2*time.Second, time.Second }},
		{"meta without id", func(c *Config) { c.Meta.ID = "" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := valid()
			c.edit(&cfg)
			if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
	for _, n := range []int{16, 24, 32} {
		cfg := valid()
		cfg.SecretKey = make([]byte, n)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("key of %d bytes: %v", n, err)
		}
	}
	cfg := valid()
	cfg.AdvertiseAddr = "10.0.0.1"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("advertise without port: %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := TestConfig(jm("jm-7")).withDefaults()
	if c.NodeName != "jm-7" {
		t.Fatalf("NodeName = %q, want the meta id", c.NodeName)
	}
	if c.Logger == nil || c.RejoinMin == 0 || c.RejoinMax == 0 || c.BroadcastTimeout == 0 || c.GoneRetention == 0 {
		t.Fatalf("defaults not set: %+v", c)
	}
	if p := profileConfig(ProfileTest); p.ProbeInterval != 200*time.Millisecond || p.ProbeTimeout != 150*time.Millisecond || p.SuspicionMult != 3 {
		t.Fatalf("test profile timings: probe %s suspicion %d", p.ProbeInterval, p.SuspicionMult)
	}
}
