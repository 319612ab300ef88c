// Package logsum keeps log lines bounded: a list of regions, tasks, attempts or TaskManagers in
// a log line (or in a message that may end up in one: a cause, a reason, an error) is written
// as its first few items and a count, and free text is clipped, so no line grows with the
// size of a job or of the cluster.
package logsum

import (
	"fmt"
	"strings"
)

// First is how many items of a list a summary names.
const First = 5

// MaxText is the most bytes Text keeps of a free text.
const MaxText = 1024

// List names the items when there are at most First of them ("a, b, c"), and otherwise the
// first First and the count ("a, b, c, d, e and 95 more (100 in all)").
func List[T any](items []T) string {
	var b strings.Builder
	for i, it := range items {
		if i == First {
			fmt.Fprintf(&b, " and %d more (%d in all)", len(items)-First, len(items))
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, it)
	}
	return b.String()
}

// Joined is List with a separator of the caller's choice between the items it names.
func Joined(items []string, sep string) string {
	if len(items) <= First {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s and %d more (%d in all)", strings.Join(items[:First], sep), len(items)-First, len(items))
}

// Text clips a free text to MaxText bytes (on a rune boundary), saying how long it was.
func Text(s string) string {
	if len(s) <= MaxText {
		return s
	}
	cut := MaxText
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes in all)", s[:cut], len(s))
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
