package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The artifact commands (docs/user-functions.md, "Artifacts"): put, list, rm; and the upload
// of the modules a job spec names by path (job submit).

const artifactUsage = `usage: jmnode artifact <put FILE | list | rm HASH> [flags]

Artifacts are files (WebAssembly modules) stored in the replicated state, named by their
sha256; a job's wasm vertex names one in its "artifact" field.

  put FILE    store a file; prints its sha256 and size
  list        the stored artifacts: hash, size, when stored, the jobs that use them
  rm HASH     remove one (refused while a job that is not terminal uses it)
`

// putTimeout bounds one upload: a 16 MiB artifact is 32 Raft entries.
const putTimeout = 5 * time.Minute

func (c *conn) artifacts() pb.ArtifactServiceClient { return pb.NewArtifactServiceClient(c.cc) }

func runArtifactPut(args []string) error {
	fs := flag.NewFlagSet("artifact put", flag.ContinueOnError)
	usageFor(fs, "jmnode artifact put FILE", "Stores FILE as an artifact (through any JobMaster: a follower relays it to the leader) and prints its sha256 and size. Storing the same bytes again stores nothing.")
	cf := newCLIFlags(fs, true)
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("artifact put needs exactly one FILE")
	}
	c, err := cf.dial()
	if err != nil {
		return err
	}
	defer c.cc.Close()
	resp, err := putArtifactFile(c, fs.Arg(0), !*quiet)
	if err != nil {
		return err
	}
	if *cf.json {
		return printJSON(resp)
	}
	what := "stored"
	if resp.Existed {
		what = "already stored"
	}
	fmt.Printf("%s  %d bytes  (%s)\n", resp.Sha256, resp.Size, what)
	return nil
}

// putArtifactFile hashes the file and uploads it, retrying the whole upload while the cluster
// has no leader or the leader reconciles. progress writes the bytes sent to stderr.
func putArtifactFile(c *conn, path string, progress bool) (*pb.PutArtifactResponse, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("artifact %s: the file is empty", path)
	}
	if st.Size() > fsm.ArtifactCeilingBytes {
		return nil, fmt.Errorf("artifact %s: %d bytes is over the ceiling of %d bytes per artifact (fsm.ArtifactCeilingBytes)", path, st.Size(), fsm.ArtifactCeilingBytes)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	sha := hex.EncodeToString(h.Sum(nil))
	var resp *pb.PutArtifactResponse
	start := time.Now()
	err = c.call(putTimeout, func(ctx context.Context) error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		var show func(int64)
		last := time.Now()
		if progress && st.Size() > fsm.ArtifactChunkSize {
			show = func(sent int64) {
				if time.Since(last) > 200*time.Millisecond || sent == st.Size() {
					fmt.Fprintf(os.Stderr, "\r%s: %d of %d bytes sent (%d%%)", filepath.Base(path), sent, st.Size(), 100*sent/st.Size())
					last = time.Now()
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), putTimeout)
		defer cancel()
		var err error
		resp, err = jmserver.UploadArtifact(ctx, c.artifacts(), f, sha, st.Size(), show)
		if show != nil {
			fmt.Fprintln(os.Stderr)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("put %s: %w", path, err)
	}
	if progress && st.Size() > fsm.ArtifactChunkSize {
		fmt.Fprintf(os.Stderr, "%s: %d bytes stored in %v\n", filepath.Base(path), st.Size(), time.Since(start).Round(time.Millisecond))
	}
	return resp, nil
}

func runArtifactList(args []string) error {
	fs := flag.NewFlagSet("artifact list", flag.ContinueOnError)
	usageFor(fs, "jmnode artifact list", "Lists the stored artifacts: sha256, size, when stored (the leader's clock at its commit), the jobs that use them (* not terminal).")
	cf := newCLIFlags(fs, true)
	consistent := fs.Bool("consistent", false, "read on the leader after it confirms its leadership")
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.ListArtifactsResponse, error) {
		return c.artifacts().ListArtifacts(ctx, &pb.ListArtifactsRequest{Consistent: *consistent})
	})
	if err != nil {
		return err
	}
	if *cf.json {
		return printJSON(resp)
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SHA256\tSIZE\tSTORED\tJOBS")
	for _, a := range resp.Artifacts {
		var jobs []string
		for _, j := range a.Jobs {
			if contains(a.ActiveJobs, j) {
				j += "*"
			}
			jobs = append(jobs, j)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", a.Sha256, a.Size, time.UnixMilli(a.StoredAt).UTC().Format(time.RFC3339), orDash(strings.Join(jobs, ",")))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Printf("%d artifacts, %d bytes (limits: %d bytes each, %d in all, %d artifacts); %d uploads in progress\n",
		len(resp.Artifacts), resp.TotalBytes, resp.MaxBytes, resp.MaxTotalBytes, resp.MaxArtifacts, resp.Uploads)
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func runArtifactRm(args []string) error {
	fs := flag.NewFlagSet("artifact rm", flag.ContinueOnError)
	usageFor(fs, "jmnode artifact rm HASH", "Removes a stored artifact; refused (naming the jobs) while a job that is not terminal uses it.")
	cf := newCLIFlags(fs, false)
	if err := parseFlags(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("artifact rm needs exactly one HASH")
	}
	sha := strings.ToLower(fs.Arg(0))
	if !fsm.ValidSHA256(sha) {
		return fmt.Errorf("artifact rm %q: not a sha256 (64 hex characters)", fs.Arg(0))
	}
	if _, err := ask(cf, func(ctx context.Context, c *conn) (*pb.RemoveArtifactResponse, error) {
		return c.artifacts().RemoveArtifact(ctx, &pb.RemoveArtifactRequest{Sha256: sha})
	}); err != nil {
		return fmt.Errorf("artifact rm %s: %w", sha, err)
	}
	fmt.Printf("removed %s\n", sha)
	return nil
}

// uploadSpecArtifacts uploads the modules a job spec's wasm vertices name by path (anything
// but a 64-hex hash; relative to the spec file) and puts their hashes in their place, saying
// so on stderr.
func uploadSpecArtifacts(c *conn, specPath string, jg *pb.JobGraph) error {
	done := map[string]string{}
	for _, v := range jg.GetVertices() {
		w := v.GetOperator().GetWasm()
		if w == nil || w.Artifact == "" || fsm.ValidSHA256(w.Artifact) {
			continue
		}
		path := w.Artifact
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(specPath), path)
		}
		sha, ok := done[path]
		if !ok {
			resp, err := putArtifactFile(c, path, true)
			if err != nil {
				return fmt.Errorf("vertex %q: wasm.artifact %q: %w", v.GetId(), w.Artifact, err)
			}
			sha = resp.Sha256
			done[path] = sha
			fmt.Fprintf(os.Stderr, "uploaded %s as artifact %s (%d bytes)\n", path, sha, resp.Size)
		}
		fmt.Fprintf(os.Stderr, "vertex %q: wasm.artifact %q replaced by %s\n", v.GetId(), w.Artifact, sha)
		w.Artifact = sha
	}
	return nil
}
