package checker

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// restoreFailure is a restore failure read from a task's failure cause: the TaskManager's
// checkpoint.RestoreError message, `unusable checkpoint 7: state file "J/chk-7/x-0-0.state" of
// x[0] (acknowledged by attempt 0): state checksum mismatch: ...` (docs/checkpoints.md, "A
// damaged checkpoint"), read here from the text as any client would.
type restoreFailure struct {
	Checkpoint   uint64
	Path, Reason string
	Cause        string
}

var restoreFailureRE = regexp.MustCompile(`unusable checkpoint ([0-9]{1,20}): state file ("(?:[^"\\]|\\.)*")(?: of [^ ]+ \(acknowledged by attempt -?[0-9]+\): ([^:]*))?`)

// reasonMissing is the reason of a state file that is not there.
const reasonMissing = "no such state"

func parseRestoreFailure(cause string) (restoreFailure, bool) {
	m := restoreFailureRE.FindStringSubmatch(cause)
	if m == nil {
		return restoreFailure{}, false
	}
	id, err := strconv.ParseUint(m[1], 10, 64)
	p, perr := strconv.Unquote(m[2])
	if err != nil || perr != nil {
		return restoreFailure{}, false
	}
	return restoreFailure{Checkpoint: id, Path: p, Reason: m[3], Cause: cause}, true
}

// DamagedState is a state file the corrupt-checkpoint nemesis damaged: the checkpoint (the
// newest completed one when it was damaged), the path under the storage root, the damage and
// the TM that was down.
type DamagedState struct {
	Checkpoint uint64    `json:"checkpoint"`
	Path       string    `json:"path"`
	Kind       string    `json:"kind"`
	What       string    `json:"what"`
	TM         string    `json:"tm"`
	At         time.Time `json:"at"`
}

// FallbackInput is what the checkpoint-fallback checker needs: the damaged states and the
// stream job's final record (its attempts' failure causes, current and history).
type FallbackInput struct {
	JobID   string
	Damaged []DamagedState
	Final   *pb.JobRecord
}

// CheckpointFallback checks what a damaged checkpoint did to the streaming job: every damaged
// state was refused by the restore that read it (a restore failure names the file: the region
// fell back to an older checkpoint), no restore refused a state the nemesis did not damage
// (the checksum never rejects a whole file), and the job did not fail for want of a usable
// checkpoint (three are retained and one is damaged at a time). Restores that fell back are
// counted. Skipped when nothing was damaged and no restore failed.
func CheckpointFallback(in FallbackInput) Result {
	r := newResult("checkpoint-fallback")
	refused := map[string]restoreFailure{} // path -> the first failure naming it
	if in.Final != nil {
		for _, ejv := range in.Final.GetExecutionGraph().GetVertices() {
			for _, ev := range ejv.GetSubtasks() {
				for _, e := range append(append([]*pb.Execution(nil), ev.GetHistory()...), ev.GetCurrent()) {
					f, ok := parseRestoreFailure(e.GetFailureCause())
					if !ok || strings.HasPrefix(e.GetFailureCause(), "region restart: ") {
						continue // a cancelled member quotes its region's failure
					}
					r.Counts["restore-failures"]++
					if _, seen := refused[f.Path]; !seen {
						refused[f.Path] = f
					}
				}
			}
		}
	}
	if len(in.Damaged) == 0 && len(refused) == 0 {
		return r.skip("no checkpoint state was damaged and no restore failed")
	}
	damaged := map[string]DamagedState{}
	for _, d := range in.Damaged {
		damaged[d.Path] = d
		r.Counts["damaged"]++
		r.Counts["damaged-"+d.Kind]++
	}
	if in.Final == nil {
		r.problem("no final record of job %s to look for its restores in", in.JobID)
		return *r
	}
	for _, d := range in.Damaged {
		if _, ok := refused[d.Path]; ok {
			r.Counts["fallbacks"]++
			continue
		}
		r.problem("%s of checkpoint %d (%s: %s, %s down at %s): no restore refused it: a damaged state was restored, or its region never restored it",
			d.Path, d.Checkpoint, d.Kind, d.What, d.TM, d.At.Format("15:04:05.000"))
	}
	for _, p := range sortedStrings(refused) {
		f := refused[p]
		if _, ok := damaged[p]; ok {
			continue
		}
		if f.Reason == reasonMissing {
			r.Counts["missing"]++
			continue
		}
		r.problem("a restore refused %s of checkpoint %d, which no fault damaged: %s", p, f.Checkpoint, f.Cause)
	}
	if strings.Contains(in.Final.GetFailureCause(), "checkpoint restore refused: ") {
		r.problem("job %s %s: %s", in.JobID, strings.TrimPrefix(in.Final.GetStatus().String(), "JOB_STATUS_"), in.Final.GetFailureCause())
	}
	r.Summary = fmt.Sprintf("%d states damaged (%d bit flips, %d truncations, %d copied chunks); %d restores refused a damaged state and fell back to an older checkpoint (%d restore failures in all)",
		r.Counts["damaged"], r.Counts["damaged-bit-flip"], r.Counts["damaged-truncate"], r.Counts["damaged-copy-chunk"], r.Counts["fallbacks"], r.Counts["restore-failures"])
	return *r
}
