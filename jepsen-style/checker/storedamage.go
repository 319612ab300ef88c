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
	Outcome string // refused, crashed, started, skipped
	Said    string
}

// StoreDamage judges the store faults: a JobMaster started on a damaged file must refuse with
// an error naming the file, or run on (its verification found nothing it serves damaged; the
// state-hash checker compares what it then holds). One that exited any other way (a panic, a
// memory fault, an error that does not name the file) served or read state it had not
// verified.
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
	}
	r.Summary = fmt.Sprintf("%d store faults: %d refused naming the file, %d ran on, %d crashed, %d skipped (nothing to damage yet)",
		len(ds), r.Counts["refused"], r.Counts["started"], r.Counts["crashed"], r.Counts["skipped"])
	return *r
}
