package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmcluster/jmcluster/testkit/testcluster"
)

// TestJobStatusShowsTheDataFlow: `jmnode job status` through a follower prints, per vertex of
// a running streaming job, records in ("-" for the source, which reads no channel) and out per
// second, backpressure, "-" for the watermark (the job has no event time) and 0 dead letters,
// within a few heartbeats.
func TestJobStatusShowsTheDataFlow(t *testing.T) {
	// Not parallel: its rates must show within a few heartbeats, a bound other tests' load stretches.
	c := testcluster.New(t, testcluster.Options{JMs: 3, TMs: 2})
	id := c.Submit(testcluster.StreamingChain("flow-status", 2, 1000, 0))
	f := c.Follower()
	addr := f.GRPCAddr
	testcluster.WaitFor(t, 10*time.Second, "the job on "+f.ID, func() (bool, string) {
		_, ok := f.A.State.Job(id)
		return ok, "not applied yet"
	})
	testcluster.WaitFor(t, 30*time.Second, "job status with the data flow of every vertex", func() (bool, string) {
		out := captureStdout(t, func() error { return run([]string{"job", "status", id, "--addr", addr}) })
		if !strings.Contains(out, "IN/S") || !strings.Contains(out, "BACKPRESSURE") || !strings.Contains(out, "DEAD LETTERS") {
			return false, out
		}
		rates := map[string][2]float64{}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 6 || (f[0] != "source" && f[0] != "map" && f[0] != "sink") {
				continue
			}
			n := len(f)
			if f[0] == "source" && f[n-5] != "-" { // a source reads no channel
				return false, out
			}
			if f[0] == "source" {
				f[n-5] = "0"
			}
			in, err1 := strconv.ParseFloat(f[n-5], 64)
			outRate, err2 := strconv.ParseFloat(f[n-4], 64)
			if err1 != nil || err2 != nil || !strings.HasSuffix(f[n-3], "%") || f[n-2] != "-" || f[n-1] != "0" {
				return false, out
			}
			rates[f[0]] = [2]float64{in, outRate}
		}
		return len(rates) == 3 && rates["source"][1] > 0 && rates["map"][0] > 0 && rates["map"][1] > 0 && rates["sink"][0] > 0, out
	})
}
