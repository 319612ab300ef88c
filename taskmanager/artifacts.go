package taskmanager

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The artifact cache (docs/user-functions.md, "Artifacts"): operator.Info.Artifact of every
// task. An artifact is fetched by its sha256 from a JobMaster (GetArtifact: the leader this TM
// talks to first, then every JobMaster it knows; any replica serves it from its own state),
// its bytes checked against the hash, and kept in memory (the most recently used, bounded by
// Config.ArtifactCacheBytes) and on disk (Config.ArtifactCacheDir, a file named by the hash),
// so a restarted region, a second task or a restarted TaskManager does not fetch it again.
// Concurrent fetches of one hash share one download.

const (
	// DefaultArtifactCacheBytes bounds the artifacts kept in memory (64 MiB).
	DefaultArtifactCacheBytes = 64 << 20
	// artifactFetchTimeout bounds one download from one JobMaster.
	artifactFetchTimeout = 2 * time.Minute
	// maxArtifactFetchBytes bounds what a download accepts (the replicated ceiling,
	// fsm.ArtifactCeilingBytes: no JobMaster stores more).
	maxArtifactFetchBytes = 64 << 20
)

type artifactCache struct {
	dir      string // "" keeps nothing on disk
	maxBytes int64
	jms      func() []string // the JobMasters to ask, in order
	conns    *connPool
	log      hclog.Logger

	mu       sync.Mutex
	lru      *list.List // of *cachedArtifact, most recent first
	byHash   map[string]*list.Element
	bytes    int64
	inflight map[string]*artifactFetch

	downloads atomic.Int64 // completed downloads from a JobMaster
}

type cachedArtifact struct {
	sha  string
	data []byte
}

type artifactFetch struct {
	done chan struct{}
	data []byte
	err  error
}

func newArtifactCache(dir string, maxBytes int64, jms func() []string, conns *connPool, log hclog.Logger) *artifactCache {
	return &artifactCache{dir: dir, maxBytes: maxBytes, jms: jms, conns: conns, log: log,
		lru: list.New(), byHash: map[string]*list.Element{}, inflight: map[string]*artifactFetch{}}
}

// get returns the artifact's bytes (shared: callers must not modify them).
func (c *artifactCache) get(ctx context.Context, sha string) ([]byte, error) {
	if !validSHA256(sha) {
		return nil, fmt.Errorf("artifact %q: not a sha256 (64 lower-case hex characters)", sha)
	}
	c.mu.Lock()
	if e, ok := c.byHash[sha]; ok {
		c.lru.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*cachedArtifact).data, nil
	}
	f, ok := c.inflight[sha]
	if !ok {
		f = &artifactFetch{done: make(chan struct{})}
		c.inflight[sha] = f
		go c.fetch(sha, f)
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.data, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch loads an artifact from disk or downloads it, keeps it, and completes f. It runs on
// its own: a caller that gives up does not stop a download others wait for.
func (c *artifactCache) fetch(sha string, f *artifactFetch) {
	f.data, f.err = c.load(sha)
	c.mu.Lock()
	delete(c.inflight, sha)
	if f.err == nil {
		c.keep(sha, f.data)
	}
	c.mu.Unlock()
	close(f.done)
}

func (c *artifactCache) load(sha string) ([]byte, error) {
	if c.dir != "" {
		if b, err := os.ReadFile(filepath.Join(c.dir, sha)); err == nil {
			if hashOf(b) == sha {
				return b, nil
			}
			c.log.Warn("cached artifact does not match its hash: fetching it again", "sha256", sha)
		}
	}
	var errs []string
	for _, addr := range c.jms() {
		b, err := c.download(addr, sha)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", addr, err))
			continue
		}
		c.downloads.Add(1)
		if c.dir != "" {
			if err := writeFileAtomic(c.dir, sha, b); err != nil {
				c.log.Warn("artifact not cached on disk", "sha256", sha, "dir", c.dir, "error", err)
			}
		}
		c.log.Info("artifact fetched", "sha256", sha, "bytes", len(b), "from", addr)
		return b, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("artifact %s: no JobMaster known to fetch it from", sha)
	}
	return nil, fmt.Errorf("artifact %s could not be fetched from any JobMaster: %s", sha, strings.Join(errs, "; "))
}

// download streams the artifact from the JobMaster at addr and checks its sha256.
func (c *artifactCache) download(addr, sha string) ([]byte, error) {
	conn, err := c.conns.get(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), artifactFetchTimeout)
	defer cancel()
	stream, err := pb.NewArtifactServiceClient(conn).GetArtifact(ctx, &pb.GetArtifactRequest{Sha256: sha})
	if err != nil {
		return nil, err
	}
	var buf []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if buf == nil && m.Size > 0 && m.Size <= maxArtifactFetchBytes {
			buf = make([]byte, 0, m.Size)
		}
		if len(buf)+len(m.Data) > maxArtifactFetchBytes {
			return nil, fmt.Errorf("more than %d bytes (maxArtifactFetchBytes)", maxArtifactFetchBytes)
		}
		buf = append(buf, m.Data...)
	}
	if got := hashOf(buf); got != sha {
		return nil, fmt.Errorf("the %d bytes received have sha256 %s", len(buf), got)
	}
	return buf, nil
}

// keep adds an artifact to the memory cache, dropping the least recently used beyond the
// bound (an artifact larger than the bound is not kept in memory). Under c.mu.
func (c *artifactCache) keep(sha string, data []byte) {
	if int64(len(data)) > c.maxBytes {
		return
	}
	c.byHash[sha] = c.lru.PushFront(&cachedArtifact{sha: sha, data: data})
	c.bytes += int64(len(data))
	for c.bytes > c.maxBytes {
		e := c.lru.Back()
		a := e.Value.(*cachedArtifact)
		c.lru.Remove(e)
		delete(c.byHash, a.sha)
		c.bytes -= int64(len(a.data))
	}
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// writeFileAtomic writes dir/name through a temporary file and a rename, so a reader never
// sees a partial file.
func writeFileAtomic(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

// artifactSources is the JobMasters to fetch from: the leader this TM talks to, then every
// JobMaster it knows, each once.
func (tm *TaskManager) artifactSources() []string {
	var out []string
	if l := tm.link.leader(); l != "" {
		out = append(out, l)
	}
	for _, a := range (&jobMasters{cfg: tm.cfg, conns: tm.conns}).list() {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// ArtifactDownloads is the number of artifacts this TaskManager downloaded from a JobMaster
// (not found in its memory or disk cache).
func (tm *TaskManager) ArtifactDownloads() int64 { return tm.artifacts.downloads.Load() }

// Artifact returns an artifact's bytes as a task's operator.Info.Artifact does: from memory,
// from the disk cache, or downloaded from a JobMaster (shared: callers must not modify them).
func (tm *TaskManager) Artifact(ctx context.Context, sha string) ([]byte, error) {
	return tm.artifacts.get(ctx, sha)
}
