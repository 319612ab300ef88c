package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jmcluster/jmcluster/membership"
)

// gossipFlags are the values of the gossip flags of both processes.
type gossipFlags struct {
	addr, join, key, keyFile, keyring, profile string
}

// register registers the gossip flags; keyringDefault says where the keyring file goes when
// --gossip-keyring is not given.
func (f *gossipFlags) register(fs *flag.FlagSet, keyringDefault string) {
	fs.StringVar(&f.addr, "gossip-addr", "", "gossip bind address host:port (empty: gossip off)")
	fs.StringVar(&f.join, "gossip-join", "", "comma-separated gossip addresses to join")
	fs.StringVar(&f.key, "gossip-key", "", "base64 AES key (16, 24 or 32 bytes; jmnode gossip keygen) encrypting gossip: the keyring's first primary key. Required with --tls-*")
	fs.StringVar(&f.keyFile, "gossip-key-file", "", "file holding --gossip-key (so the key is not on the command line)")
	fs.StringVar(&f.keyring, "gossip-keyring", "", "file holding the gossip keyring across restarts, written at start and by every rotation (jmnode gossip keyring); when it exists it wins over --gossip-key (default: "+keyringDefault+")")
	fs.StringVar(&f.profile, "gossip-profile", "lan", "gossip timing profile: lan, local or test")
}

// config is the membership configuration the flags say, without its key (secure adds it once
// TLS is loaded); nil when gossip is off. dir is where the keyring file goes without
// --gossip-keyring ("": nowhere, a rotation then lasts until the process ends).
func (f gossipFlags) config(dir string) *membership.Config {
	if f.addr == "" {
		return nil
	}
	g := membership.DefaultConfig()
	g.BindAddr, g.Join, g.Profile = f.addr, splitList(f.join), f.profile
	g.KeyringFile = f.keyring
	if g.KeyringFile == "" && dir != "" {
		g.KeyringFile = filepath.Join(dir, "gossip.keyring")
	}
	return &g
}

// check refuses a key flag given without gossip, and the key's form, the key file and the
// keyring file (dir: where the keyring goes without --gossip-keyring), naming the flag, before
// anything starts. The membership rules (addresses, profile) are membership.Config.Validate's.
func (f gossipFlags) check(dir string) error {
	if f.addr == "" {
		switch {
		case f.key != "":
			return flagError("--gossip-key", "(hidden)", "needs --gossip-addr: without it gossip is off and the key would be ignored")
		case f.keyFile != "":
			return flagError("--gossip-key-file", f.keyFile, "needs --gossip-addr: without it gossip is off and the key would be ignored")
		}
		return nil
	}
	if f.key != "" {
		if _, err := membership.ParseKey(f.key); err != nil {
			return flagError("--gossip-key", "(hidden)", "must be a base64 key of 16, 24 or 32 bytes, as 'jmnode gossip keygen' prints (%v)", err)
		}
	}
	if f.keyFile != "" {
		b, err := os.ReadFile(f.keyFile)
		if err != nil {
			return flagError("--gossip-key-file", f.keyFile, "must be a readable file (%v)", pathReason(err))
		}
		if _, err := membership.ParseKey(string(b)); err != nil {
			return flagError("--gossip-key-file", f.keyFile, "must hold a base64 key of 16, 24 or 32 bytes (%v)", err)
		}
	}
	keyring := f.keyring
	if keyring == "" && dir != "" {
		return nil // in the data or work directory, checked as such
	}
	return keyringFile(keyring)
}

// secure sets g's key from --gossip-key or --gossip-key-file; with TLS on (tlsOn), gossip must
// be encrypted, by that key or by the keyring file. g nil (gossip off) is left alone.
func (f gossipFlags) secure(g *membership.Config, tlsOn bool) error {
	if g == nil {
		return nil
	}
	key, what := f.key, "--gossip-key"
	if f.keyFile != "" {
		if key != "" {
			return errors.New("give --gossip-key or --gossip-key-file, not both")
		}
		b, err := os.ReadFile(f.keyFile)
		if err != nil {
			return fmt.Errorf("--gossip-key-file: %w", err)
		}
		key, what = string(b), "--gossip-key-file "+f.keyFile
	}
	if key != "" {
		k, err := membership.ParseKey(key)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		g.SecretKey = k
	}
	if tlsOn && len(g.SecretKey) == 0 {
		encrypted := false
		if g.KeyringFile != "" {
			_, ok, err := membership.LoadKeyringFile(g.KeyringFile)
			if err != nil {
				return err
			}
			encrypted = ok
		}
		if !encrypted {
			return fmt.Errorf("--gossip-key is required with --tls-*: gossip names the leader TaskManagers report to, and unencrypted it can be read and forged by anyone on the network (make one with 'jmnode gossip keygen')")
		}
	}
	return nil
}
