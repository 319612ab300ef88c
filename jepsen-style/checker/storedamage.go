package checker

import (
	"fmt"
	"strings"
)

// Damage is one store fault of a run: a killed JobMaster's file damaged, the JobMaster started
// again, and what it did.
type Damage struct {
	Fault   int
	Node    string
	File    string
	Mode    string
	Damage  string
	Changed string // what the damage changed that the JobMaster reads; "" when nothing
	Outcome string // refused, crashed, started, skipped
	Said    string
}

// StoreDamage judges the store faults: a JobMaster started on a damaged file must refuse with
// an error naming the file. It may run on only when the damage changed nothing it reads (the
// nemesis draws the damage again until it does, so this is rare; the state-hash checker
// compares what it then holds). One that ran on a file whose log entries, stable values or
// snapshot bytes changed serves bytes it never verified, whether or not it has read them yet;
// one that exited any other way (a panic, a memory fault, an error that does not name the file)
// read state it had not verified.
func StoreDamage(ds []Damage) Result {
	r := newResult("store-damage")
	if len(ds) == 0 {
		return r.skip("no store fault in the run")
	}
	for _, d := range ds {
		r.Counts[d.Outcome]++
		if d.Outcome == "crashed" {
			said := d.Said
			if len(said) > 400 {
				said = said[len(said)-400:]
			}
			r.problem("fault %d: %s exited on its damaged %s (%s, %s) without naming the damage: %s",
				d.Fault, d.Node, d.File, d.Mode, d.Damage, strings.ReplaceAll(said, "\n", " | "))
		}
		if d.Outcome == "started" && d.Changed != "" {
			r.problem("fault %d: %s ran on its damaged %s (%s, %s), which changed %s: it serves what it never verified",
				d.Fault, d.Node, d.File, d.Mode, d.Damage, d.Changed)
		}
	}
	r.Summary = fmt.Sprintf("%d store faults: %d refused naming the file, %d ran on, %d crashed, %d skipped (nothing to damage yet)",
		len(ds), r.Counts["refused"], r.Counts["started"], r.Counts["crashed"], r.Counts["skipped"])
	return *r
}
