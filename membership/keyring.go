package membership

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
)

// The gossip keyring: the AES keys this node decrypts gossip with, one of them (the primary)
// encrypting what it sends. Keys rotate without members flapping in three steps taken on every
// member (Consul's keyring is the model): install the new key (everyone decrypts both), use it
// (senders switch one by one; receivers still decrypt the old), remove the old one. A member
// that has not installed a key cannot read a sender that uses it, and a member that removed a
// key cannot read a sender still using it: the order matters, and the fan-out that drives it
// (OperatorService.GossipKeyring) checks it before each step.

// Keyring errors.
var (
	// ErrNotEncrypted means gossip runs without encryption, so there is no keyring to change:
	// encryption is switched on by starting every member with a key.
	ErrNotEncrypted = errors.New("membership: gossip is not encrypted (start every member with --gossip-key to use a keyring)")
	// ErrBadKey means a key is not a 16, 24 or 32 byte AES key.
	ErrBadKey = errors.New("membership: gossip key must be 16, 24 or 32 bytes (AES-128, -192 or -256)")
	// ErrKeyNotInstalled means a key to use or remove is not in the keyring.
	ErrKeyNotInstalled = errors.New("membership: gossip key is not installed")
	// ErrRemovePrimary means the key to remove is the one this node encrypts with.
	ErrRemovePrimary = errors.New("membership: the primary gossip key cannot be removed (use another key first)")
)

// KeyringFileMode is the permission of a keyring file: it holds secrets.
const KeyringFileMode = 0o600

// KeyFingerprint names a key without revealing it: "sha256:" and the first 8 bytes of its
// SHA-256 in hex. Listings print fingerprints, never keys.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// NewKey returns a random 32-byte gossip key, base64 encoded (jmnode gossip keygen).
func NewKey() (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(k), nil
}

// ParseKey decodes a base64 gossip key and checks its length.
func ParseKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: not base64: %v", ErrBadKey, err)
	}
	if err := ValidateKey(k); err != nil {
		return nil, err
	}
	return k, nil
}

// ValidateKey reports whether k is a 16, 24 or 32 byte AES key (ErrBadKey when not).
func ValidateKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w, got %d bytes", ErrBadKey, len(k))
}

// KeyringState is a keyring: its primary key first in Keys.
type KeyringState struct {
	Primary []byte
	Keys    [][]byte // every key, the primary first
}

// Fingerprints returns the primary's fingerprint and every key's, the primary first.
func (s KeyringState) Fingerprints() (primary string, keys []string) {
	for _, k := range s.Keys {
		keys = append(keys, KeyFingerprint(k))
	}
	return KeyFingerprint(s.Primary), keys
}

// keyringFile is the on-disk form of a keyring (Config.KeyringFile).
type keyringFile struct {
	Primary string   `json:"primary"`
	Keys    []string `json:"keys"`
}

// LoadKeyringFile reads a keyring file. A missing file is (KeyringState{}, false, nil).
func LoadKeyringFile(path string) (KeyringState, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return KeyringState{}, false, nil
	}
	if err != nil {
		return KeyringState{}, false, fmt.Errorf("gossip keyring %s: %w", path, err)
	}
	var f keyringFile
	if err := json.Unmarshal(b, &f); err != nil {
		return KeyringState{}, false, fmt.Errorf("gossip keyring %s: %w", path, err)
	}
	primary, err := ParseKey(f.Primary)
	if err != nil {
		return KeyringState{}, false, fmt.Errorf("gossip keyring %s: primary: %w", path, err)
	}
	st := KeyringState{Primary: primary, Keys: [][]byte{primary}}
	for i, s := range f.Keys {
		k, err := ParseKey(s)
		if err != nil {
			return KeyringState{}, false, fmt.Errorf("gossip keyring %s: key %d: %w", path, i, err)
		}
		if !containsKey(st.Keys, k) {
			st.Keys = append(st.Keys, k)
		}
	}
	return st, true, nil
}

// writeKeyringFile replaces path with st: a temporary file in the same directory, synced,
// then renamed over it, so a crash leaves the old keyring or the new one, never half of one.
func writeKeyringFile(path string, st KeyringState) error {
	f := keyringFile{Primary: base64.StdEncoding.EncodeToString(st.Primary)}
	for _, k := range st.Keys {
		f.Keys = append(f.Keys, base64.StdEncoding.EncodeToString(k))
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".gossip-keyring-*")
	if err != nil {
		return fmt.Errorf("gossip keyring %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename: no such file
	err = tmp.Chmod(KeyringFileMode)
	if err == nil {
		_, err = tmp.Write(append(b, '\n'))
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		if d, derr := os.Open(dir); derr == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("gossip keyring %s: %w", path, err)
	}
	return nil
}

func containsKey(keys [][]byte, k []byte) bool {
	return slices.ContainsFunc(keys, func(x []byte) bool { return bytes.Equal(x, k) })
}

// initialKeyring is the keyring a node starts with: the keyring file's when it exists (it
// holds the last rotation), else Config.SecretKey and Config.Keys. The file is written when it
// is named but missing, so the first rotation has something to change.
func (c Config) initialKeyring() (KeyringState, error) {
	if c.KeyringFile != "" {
		st, ok, err := LoadKeyringFile(c.KeyringFile)
		if err != nil {
			return KeyringState{}, err
		}
		if ok {
			if len(c.SecretKey) > 0 && !containsKey(st.Keys, c.SecretKey) {
				c.Logger.Warn("the keyring file does not hold the configured gossip key; the keyring file wins (it holds the last rotation)",
					"file", c.KeyringFile, "configured", KeyFingerprint(c.SecretKey), "primary", KeyFingerprint(st.Primary))
			}
			return st, nil
		}
	}
	if len(c.SecretKey) == 0 {
		return KeyringState{}, nil
	}
	st := KeyringState{Primary: slices.Clone(c.SecretKey), Keys: [][]byte{slices.Clone(c.SecretKey)}}
	for _, k := range c.Keys {
		if !containsKey(st.Keys, k) {
			st.Keys = append(st.Keys, slices.Clone(k))
		}
	}
	if c.KeyringFile != "" {
		if err := writeKeyringFile(c.KeyringFile, st); err != nil {
			return KeyringState{}, err
		}
	}
	return st, nil
}

// Encrypted reports whether this node encrypts gossip (it has a keyring).
func (m *Membership) Encrypted() bool { return m.keyring != nil }

// Keyring returns this node's keyring.
func (m *Membership) Keyring() (KeyringState, error) {
	if m.keyring == nil {
		return KeyringState{}, ErrNotEncrypted
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	return m.keyringLocked(), nil
}

// keyringLocked copies memberlist's keyring: GetKeys returns its own slice, which RemoveKey
// shifts in place.
func (m *Membership) keyringLocked() KeyringState {
	keys := m.keyring.GetKeys()
	st := KeyringState{Primary: slices.Clone(m.keyring.GetPrimaryKey()), Keys: make([][]byte, len(keys))}
	for i, k := range keys {
		st.Keys[i] = slices.Clone(k)
	}
	return st
}

// InstallKey adds key to the keyring: this node decrypts gossip encrypted with it from now on.
// Installing a key already installed changes nothing.
func (m *Membership) InstallKey(key []byte) error {
	return m.changeKeyring("install", key, func(st KeyringState) (KeyringState, error) {
		if !containsKey(st.Keys, key) {
			st.Keys = append(st.Keys, slices.Clone(key))
		}
		return st, nil
	}, m.keyring.AddKey)
}

// UseKey makes an installed key the primary: this node encrypts what it sends with it.
func (m *Membership) UseKey(key []byte) error {
	return m.changeKeyring("use", key, func(st KeyringState) (KeyringState, error) {
		if !containsKey(st.Keys, key) {
			return st, fmt.Errorf("%w: %s (install it first)", ErrKeyNotInstalled, KeyFingerprint(key))
		}
		rest := slices.DeleteFunc(st.Keys, func(k []byte) bool { return bytes.Equal(k, key) })
		return KeyringState{Primary: slices.Clone(key), Keys: append([][]byte{slices.Clone(key)}, rest...)}, nil
	}, m.keyring.UseKey)
}

// RemoveKey drops a key that is not the primary: gossip encrypted with it is no longer read.
func (m *Membership) RemoveKey(key []byte) error {
	return m.changeKeyring("remove", key, func(st KeyringState) (KeyringState, error) {
		if bytes.Equal(st.Primary, key) {
			return st, fmt.Errorf("%w: %s", ErrRemovePrimary, KeyFingerprint(key))
		}
		if !containsKey(st.Keys, key) {
			return st, fmt.Errorf("%w: %s", ErrKeyNotInstalled, KeyFingerprint(key))
		}
		st.Keys = slices.DeleteFunc(st.Keys, func(k []byte) bool { return bytes.Equal(k, key) })
		return st, nil
	}, m.keyring.RemoveKey)
}

// changeKeyring computes the next keyring with next, writes it to the keyring file (when there
// is one), and only then changes memberlist's keyring with apply: a node told the change
// succeeded keeps it across a restart.
func (m *Membership) changeKeyring(op string, key []byte, next func(KeyringState) (KeyringState, error), apply func([]byte) error) error {
	if m.keyring == nil {
		return ErrNotEncrypted
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	cur := m.keyringLocked()
	st, err := next(KeyringState{Primary: cur.Primary, Keys: slices.Clone(cur.Keys)})
	if err != nil {
		return err
	}
	if m.cfg.KeyringFile != "" {
		if err := writeKeyringFile(m.cfg.KeyringFile, st); err != nil {
			return err
		}
	}
	if err := apply(key); err != nil {
		if m.cfg.KeyringFile != "" {
			if rerr := writeKeyringFile(m.cfg.KeyringFile, cur); rerr != nil {
				m.logger.Error("the keyring file holds a change that did not take effect, and putting the old keyring back failed: it takes effect at the next start unless the file is fixed",
					"op", op, "key", KeyFingerprint(key), "file", m.cfg.KeyringFile, "error", rerr)
			}
		}
		return fmt.Errorf("membership: %s gossip key: %w", op, err)
	}
	m.logger.Info("gossip keyring changed", "op", op, "key", KeyFingerprint(key), "primary", KeyFingerprint(st.Primary), "keys", len(st.Keys))
	return nil
}

// newMemberlistKeyring builds memberlist's keyring from st (nil when st has no key).
func newMemberlistKeyring(st KeyringState) (*memberlist.Keyring, error) {
	if len(st.Keys) == 0 {
		return nil, nil
	}
	return memberlist.NewKeyring(st.Keys, st.Primary)
}
