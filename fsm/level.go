//go:build !jmprev

package fsm

// CommandLevel is the newest set of commands this build applies (command.go).
const CommandLevel = 3
