package main

import (
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// TestFailpointsListing: `jmnode failpoints` lists every failpoint of the table with its kind
// and description.
func TestFailpointsListing(t *testing.T) {
	var b strings.Builder
	printFailpoints(&b)
	out := b.String()
	for _, p := range failpoint.List() {
		if !strings.Contains(out, p.Name) || !strings.Contains(out, p.Description) {
			t.Errorf("listing lacks %s: %q", p.Name, p.Description)
		}
	}
	if !strings.Contains(out, failpoint.EnvVar) || !strings.Contains(out, "pause(NAME)=DUR") {
		t.Errorf("listing does not say how to set them:\n%s", out)
	}
}

// TestProcessesRefuseBadFailpoints: a jobmaster or taskmanager refuses to start with an
// unknown failpoint or a retired JMNODE_UNSAFE_* variable, and the error names it.
func TestProcessesRefuseBadFailpoints(t *testing.T) {
	t.Cleanup(failpoint.Reset)
	for _, tc := range []struct{ key, value, want string }{
		{failpoint.EnvVar, "early-gate,pause(befor-submit-task)=2s", `unknown failpoint "befor-submit-task"`},
		{failpoint.EnvVar, "pause(before-submit-task)=0s", "must be above 0"},
		{"JMNODE_UNSAFE_EARLY_GATE", "1", "JMNODE_UNSAFE_EARLY_GATE is no longer read: set JMNODE_FAILPOINTS=early-gate instead"},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.key, tc.value)
			for _, args := range [][]string{
				{"jobmaster", "--id", "jm1", "--data-dir", t.TempDir(), "--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--http-addr", ""},
				{"taskmanager", "--id", "tm1", "--jm", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:0", "--data-addr", "127.0.0.1:0"},
			} {
				err := run(args)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%s: got %v, want an error containing %q", args[0], err, tc.want)
				}
				if failpoint.Current() != "" {
					t.Fatalf("%s: refused but set %q", args[0], failpoint.Current())
				}
			}
		})
	}
}
