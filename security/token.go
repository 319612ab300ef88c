package security

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// MinTokenLength is the shortest secret a token file may hold (a 32-hex-digit secret, as
// `openssl rand -hex 16` prints, is 32 characters).
const MinTokenLength = 16

// TokenRoles are the roles a bearer token may carry: people and tools. JobMasters and
// TaskManagers authenticate with certificates only.
var TokenRoles = []Role{RoleOperator, RoleReader}

// Tokens are the bearer tokens a JobMaster accepts (--token-file): one a line,
// "NAME ROLE SECRET", # comments and blank lines ignored. The file is read again when it
// changes on disk (modification time or size); a version that does not parse is logged and
// the previous one stays in use.
type Tokens struct {
	file string
	log  hclog.Logger

	mu     sync.Mutex
	stamp  stamp
	byHash map[[sha256.Size]byte]Identity
}

// LoadTokens reads file, which must parse.
func LoadTokens(file string, log hclog.Logger) (*Tokens, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	t := &Tokens{file: file, log: log.Named("tokens")}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	m, err := parseTokens(file)
	if err != nil {
		return nil, err
	}
	t.byHash, t.stamp = m, stamp{fi.ModTime(), fi.Size()}
	return t, nil
}

func parseTokens(file string) (map[[sha256.Size]byte]Identity, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	out := map[[sha256.Size]byte]Identity{}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("token file %s line %d: want NAME ROLE SECRET, got %d fields", file, n, len(f))
		}
		r, err := ParseRole(f[1])
		if err != nil || !isTokenRole(r) {
			return nil, fmt.Errorf("token file %s line %d: role %q: a token is an operator or a reader", file, n, f[1])
		}
		if len(f[2]) < MinTokenLength {
			return nil, fmt.Errorf("token file %s line %d: the secret of %q is %d characters, under the minimum of %d", file, n, f[0], len(f[2]), MinTokenLength)
		}
		if names[f[0]] {
			return nil, fmt.Errorf("token file %s line %d: a second token named %q", file, n, f[0])
		}
		h := sha256.Sum256([]byte(f[2]))
		if _, dup := out[h]; dup {
			return nil, fmt.Errorf("token file %s line %d: the secret of %q is another token's", file, n, f[0])
		}
		names[f[0]] = true
		out[h] = Identity{Name: f[0], Role: r, Token: true}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file %s: %w", file, err)
	}
	return out, nil
}

func isTokenRole(r Role) bool {
	for _, x := range TokenRoles {
		if x == r {
			return true
		}
	}
	return false
}

// ErrBadToken: a bearer token that is not in the file.
var ErrBadToken = errors.New("unknown bearer token")

// Lookup returns the identity of the token whose secret is secret. Secrets are compared by
// their SHA-256 (a map lookup of the digest): the time taken says nothing of the secret.
func (t *Tokens) Lookup(secret string) (Identity, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fi, err := os.Stat(t.file); err == nil && (stamp{fi.ModTime(), fi.Size()}) != t.stamp {
		t.stamp = stamp{fi.ModTime(), fi.Size()}
		if m, err := parseTokens(t.file); err != nil {
			t.log.Warn("token file changed but does not parse; still using the previous tokens", "error", err)
		} else {
			t.byHash = m
			t.log.Info("reloaded the token file", "tokens", len(m))
		}
	}
	id, ok := t.byHash[sha256.Sum256([]byte(secret))]
	if !ok {
		return Identity{}, ErrBadToken
	}
	return id, nil
}
