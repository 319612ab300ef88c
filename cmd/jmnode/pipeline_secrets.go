package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// checkNoSecretLeaks saves what a user could see or copy of the cluster, a snapshot of the
// replicated state (`jmnode snapshot save`) and the job's full view (GetJob), then reads every
// file under work but the secrets' own (the secrets directory and the NATS server's
// configuration) for the credentials' values: the
// processes' logs, the JobMasters' Raft logs and snapshots, the TaskManagers' work
// directories and event logs, the checkpoints, the servers' logs.
func (d *pipelineDemo) checkNoSecretLeaks(ctx context.Context, work, jobID string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	addr := d.liveJM().Addrs.GRPC
	snap := filepath.Join(work, "state.snapshot")
	if out, err := exec.CommandContext(ctx, self, "snapshot", "save", snap, "--addr", addr).CombinedOutput(); err != nil {
		return fmt.Errorf("jmnode snapshot save: %v: %s", err, out)
	}
	c := d.client(addr)
	defer c.cc.Close()
	var view []byte
	if err := c.call(10*time.Second, func(ctx context.Context) error {
		r, err := c.client().GetJob(ctx, &pb.GetJobRequest{JobId: jobID})
		if err == nil {
			view, err = protojson.Marshal(r)
		}
		return err
	}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "job-view.json"), view, 0o600); err != nil {
		return err
	}
	secrets := [][]byte{[]byte(d.nats.pw)}
	if d.pg != nil {
		secrets = append(secrets, []byte(d.pg.password))
	}
	skip := map[string]bool{d.secrets: true, filepath.Join(work, "nats.conf"): true}
	files, bytesRead := 0, int64(0)
	var leaks []string
	err = filepath.WalkDir(work, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skip[path] {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		bytesRead += int64(len(b))
		for _, s := range secrets {
			if bytes.Contains(b, s) {
				leaks = append(leaks, path)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(leaks) > 0 {
		return fmt.Errorf("a credential's value is in %d files: %v", len(leaks), leaks)
	}
	d.say("secrets: no credential's value in %d files (%d bytes): the logs, Raft logs, a snapshot, the job's view, work directories, checkpoints", files, bytesRead)
	return nil
}
