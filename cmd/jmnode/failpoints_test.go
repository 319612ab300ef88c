package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TestFailpointsFileIsFollowed: a running process takes the terms of its failpoints file on
// top of its start-up setting, follows each change, and returns to its start-up setting when
// the file goes.
func TestFailpointsFileIsFollowed(t *testing.T) {
	failpoint.Set(t, "early-gate")
	path := filepath.Join(t.TempDir(), "failpoints")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); followFailpointsFile(ctx, hclog.NewNullLogger(), path, "early-gate") }()
	defer func() { cancel(); <-done }()

	wait := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for failpoint.Current() != want {
			if time.Now().After(deadline) {
				t.Fatalf("failpoints %q, want %q", failpoint.Current(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := os.WriteFile(path, []byte("pause(disk-write)=150ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wait("early-gate,pause(disk-write)=150ms")
	if err := os.WriteFile(path, []byte("pause(disk-write)=300ms"), 0o644); err != nil {
		t.Fatal(err)
	}
	wait("early-gate,pause(disk-write)=300ms")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wait("early-gate")
}
