package jobmaster

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
	"github.com/jmcluster/jmcluster/wasmhost"
)

// The check of a job's WebAssembly modules at submit (docs/user-functions.md, "Refused
// modules"): the leader refuses a job whose wasm vertex names a module a TaskManager would
// refuse to run, instead of committing a job whose tasks fail at their start.

// ErrRefusedModule: a job's wasm vertex names an artifact that is not WebAssembly, or a
// module the host refuses or that does not export the vertex's function (INVALID_ARGUMENT).
var ErrRefusedModule = errors.New("jobmaster: module refused")

// maxModuleVerdicts bounds the verdicts a JobMaster keeps (an entry is a module's exports);
// when full it starts over.
const maxModuleVerdicts = 256

// moduleVerdict is what the check of one module found: the refusal of wasmhost.Check (nil
// for a module the host runs) and the functions the module exports. An artifact is
// content-addressed, so its verdict never changes.
type moduleVerdict struct {
	err     error
	exports []string
}

// checkModules refuses a job with a wasm vertex whose module wasmhost.Check refuses, or that
// does not export the vertex's wasm.function, naming each vertex, the module's short hash and
// the cause. It checks only what a TaskManager's wasm operator requires at a task's start: a
// PROCESS module without jm_timer runs (its timers fail when they fire). Each module is read
// from the state and inspected (its imports and exports, not compiled: milliseconds) once per
// JobMaster. The caller holds artifactMu (which guards the verdicts) and checked that the
// state holds every artifact (checkArtifacts).
func (jm *JobMaster) checkModules(jg *pb.JobGraph) error {
	var refused []string
	for _, v := range jg.GetVertices() {
		w := v.GetOperator().GetWasm()
		if w.GetArtifact() == "" {
			continue
		}
		vd := jm.moduleVerdict(w.GetArtifact())
		switch {
		case vd.err != nil:
			refused = append(refused, fmt.Sprintf("vertex %q: wasm.artifact %s: %v", v.GetId(), shortSHA(w.GetArtifact()), vd.err))
		case !slices.Contains(vd.exports, w.GetFunction()):
			refused = append(refused, fmt.Sprintf("vertex %q: wasm.artifact %s does not export the function %q (wasm.function); it exports %s",
				v.GetId(), shortSHA(w.GetArtifact()), w.GetFunction(), userFunctions(vd.exports)))
		}
	}
	if len(refused) > 0 {
		return errorf(ErrRefusedModule, "job %q names WebAssembly modules a TaskManager would refuse to run: %s", jg.GetJobId(), strings.Join(refused, "; "))
	}
	return nil
}

// moduleVerdict returns the verdict on the stored artifact sha, checking it on the first ask.
// The caller holds artifactMu.
func (jm *JobMaster) moduleVerdict(sha string) moduleVerdict {
	if vd, ok := jm.verdicts[sha]; ok {
		return vd
	}
	module, ok := jm.artifactBytes(sha)
	if !ok {
		return moduleVerdict{err: errors.New("the state does not hold it")} // not kept: it may be stored later
	}
	vd := moduleVerdict{err: wasmhost.Check(module)}
	if vd.err == nil {
		info, err := wasmhost.Inspect(module)
		if err != nil {
			return moduleVerdict{err: err}
		}
		for _, e := range info.Exports {
			if info.HasExport(e.Name) { // a function
				vd.exports = append(vd.exports, e.Name)
			}
		}
	}
	if len(jm.verdicts) >= maxModuleVerdicts || jm.verdicts == nil {
		jm.verdicts = map[string]moduleVerdict{}
	}
	jm.verdicts[sha] = vd
	return vd
}

// artifactBytes is the content of the stored artifact sha, in one slice (its chunks joined).
func (jm *JobMaster) artifactBytes(sha string) ([]byte, bool) {
	info, chunks, ok := jm.state.Artifact(sha)
	if !ok {
		return nil, false
	}
	out := make([]byte, 0, info.Size)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, true
}

// userFunctions lists the exported functions a vertex may name: not the ABI's (jm_*) nor the
// runtime's (_initialize, _start).
func userFunctions(exports []string) string {
	var out []string
	for _, e := range exports {
		if !strings.HasPrefix(e, "jm_") && !strings.HasPrefix(e, "_") {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func shortSHA(s string) string { return s[:min(len(s), 12)] }
