//go:build race

package fsm

// raceEnabled: the race detector makes the largest at-the-ceiling records take minutes.
const raceEnabled = true
