package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jmcluster/jmcluster/internal/setting"
	"github.com/jmcluster/jmcluster/membership"
)

// gossipFlags are the gossip flags of both processes.
type gossipFlags struct {
	addr, join, key, keyFile, keyring, profile *string
}

// newGossipFlags registers the gossip flags; keyringDefault says where the keyring file goes
// when --gossip-keyring is not given.
func newGossipFlags(fs *flag.FlagSet, keyringDefault string) gossipFlags {
	return gossipFlags{
		addr:    fs.String("gossip-addr", "", "gossip bind address host:port (empty: gossip off)"),
		join:    fs.String("gossip-join", "", "comma-separated gossip addresses to join"),
		key:     fs.String("gossip-key", "", "base64 AES key (16, 24 or 32 bytes; jmnode gossip keygen) encrypting gossip: the keyring's first primary key. Required with --tls-*"),
		keyFile: fs.String("gossip-key-file", "", "file holding --gossip-key (so the key is not on the command line)"),
		keyring: fs.String("gossip-keyring", "", "file holding the gossip keyring across restarts, written at start and by every rotation (jmnode gossip keyring); when it exists it wins over --gossip-key (default: "+keyringDefault+")"),
		profile: fs.String("gossip-profile", "lan", "gossip timing profile: lan, local or test"),
	}
}

// check refuses a gossip flag no pool can work with, naming it, before anything starts: the
// membership rules (addresses, profile), the key's form, the key file and the keyring file
// (dir: where the keyring goes without --gossip-keyring).
func (f gossipFlags) check(dir string) error {
	if *f.addr == "" {
		return nil
	}
	g := membership.DefaultConfig()
	g.BindAddr, g.Join, g.Profile = *f.addr, splitList(*f.join), *f.profile
	g.Meta = membership.Meta{Role: membership.RoleTaskManager, ID: "check"} // the agent sets the real one
	if err := setting.Named(g.Validate(), gossipFlagNames); err != nil {
		return err
	}
	if *f.key != "" {
		if _, err := membership.ParseKey(*f.key); err != nil {
			return flagError("--gossip-key", "(hidden)", "must be a base64 key of 16, 24 or 32 bytes, as 'jmnode gossip keygen' prints (%v)", err)
		}
	}
	if *f.keyFile != "" {
		b, err := os.ReadFile(*f.keyFile)
		if err != nil {
			return flagError("--gossip-key-file", *f.keyFile, "must be a readable file (%v)", pathReason(err))
		}
		if _, err := membership.ParseKey(string(b)); err != nil {
			return flagError("--gossip-key-file", *f.keyFile, "must hold a base64 key of 16, 24 or 32 bytes (%v)", err)
		}
	}
	keyring := *f.keyring
	if keyring == "" && dir != "" {
		return nil // in the data or work directory, checked as such
	}
	return keyringFile(keyring)
}

// config is the membership configuration the flags say, nil when gossip is off. dir is where
// the keyring file goes without --gossip-keyring ("" : nowhere, a rotation then lasts until
// the process ends); with TLS on (tlsOn), gossip must be encrypted.
func (f gossipFlags) config(dir string, tlsOn bool) (*membership.Config, error) {
	if *f.addr == "" {
		return nil, nil
	}
	g := membership.DefaultConfig()
	g.BindAddr, g.Join, g.Profile = *f.addr, splitList(*f.join), *f.profile
	key, what := *f.key, "--gossip-key"
	if *f.keyFile != "" {
		if key != "" {
			return nil, errors.New("give --gossip-key or --gossip-key-file, not both")
		}
		b, err := os.ReadFile(*f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file: %w", err)
		}
		key, what = string(b), "--gossip-key-file "+*f.keyFile
	}
	if key != "" {
		k, err := membership.ParseKey(key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		g.SecretKey = k
	}
	g.KeyringFile = *f.keyring
	if g.KeyringFile == "" && dir != "" {
		g.KeyringFile = filepath.Join(dir, "gossip.keyring")
	}
	if tlsOn && len(g.SecretKey) == 0 {
		encrypted := false
		if g.KeyringFile != "" {
			_, ok, err := membership.LoadKeyringFile(g.KeyringFile)
			if err != nil {
				return nil, err
			}
			encrypted = ok
		}
		if !encrypted {
			return nil, fmt.Errorf("--gossip-key is required with --tls-*: gossip names the leader TaskManagers report to, and unencrypted it can be read and forged by anyone on the network (make one with 'jmnode gossip keygen')")
		}
	}
	return &g, nil
}
