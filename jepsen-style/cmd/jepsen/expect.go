package main

import jepsen "github.com/jmcluster/jmcluster/jepsen-style"

// expectedInvalid is why a scenario may be invalid by design ("" for the scenarios that must be
// valid): `jepsen matrix` reports such a run apart and does not count it failed.
func expectedInvalid(name string) string {
	s, err := jepsen.LookupScenario(name)
	if err != nil {
		return ""
	}
	return s.ExpectInvalid
}
