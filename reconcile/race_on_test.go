//go:build race

package reconcile_test

// raceEnabled: the race detector slows the replicas' appliers and the scheduler about tenfold.
const raceEnabled = true
