//go:build jmprev

package fsm

// A build with -tags jmprev stands for the release before command level 1 in the mixed-version
// test (cmd/jmnode TestMixedVersionReconcilesWithWholeRecords): it gossips level 0 and has no
// applier for RECONCILE_KEPT nor for the checkpoint commands (level 2), so such a command would
// stop it (Apply panics on an unknown type that is not ignorable), as it would stop that
// release.

// CommandLevel is the newest set of commands this build applies (command.go).
const CommandLevel = 0
