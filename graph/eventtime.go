package graph

import (
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The bounds of a source's event_time.
const (
	// MaxOutOfOrdernessMs bounds event_time.max_out_of_orderness_ms: a week.
	MaxOutOfOrdernessMs = 7 * 24 * 3600 * 1000
	// MaxIdleTimeoutMs bounds event_time.idle_timeout_ms: a day.
	MaxIdleTimeoutMs = 24 * 3600 * 1000
	// MaxWatermarkIntervalMs bounds event_time.watermark_interval_ms: an hour.
	MaxWatermarkIntervalMs = 3600 * 1000
	// MaxTimePathBytes bounds the length of event_time.time_path.
	MaxTimePathBytes = 256
)

// validateEventTime checks op's event_time: sources only, of a kind whose records can carry
// an event time; its durations not negative and bounded; time_path a path of non-empty field
// names; time_format one of TimeFormat's values.
func validateEventTime(op *pb.Operator, k OperatorKind, add addFunc) {
	et := op.GetEventTime()
	if et == nil {
		return
	}
	if k.Role != RoleSource {
		add("event_time", "is for sources only (%s is a %s)", k.Name, k.Role)
		return
	}
	if k.Name == "sequence_source" {
		add("event_time", "sequence_source's records are numbers without event time (no time of their own, no JSON value for time_path)")
	}
	if k.Name == "file_source" && et.GetTimePath() == "" {
		add("event_time.time_path", "is empty: file_source's lines have no time of their own (a JSON line's time is read at time_path)")
	}
	for _, f := range []struct {
		name     string
		v, bound int64
		bname    string
	}{
		{"max_out_of_orderness_ms", et.GetMaxOutOfOrdernessMs(), MaxOutOfOrdernessMs, "MaxOutOfOrdernessMs"},
		{"idle_timeout_ms", et.GetIdleTimeoutMs(), MaxIdleTimeoutMs, "MaxIdleTimeoutMs"},
		{"watermark_interval_ms", et.GetWatermarkIntervalMs(), MaxWatermarkIntervalMs, "MaxWatermarkIntervalMs"},
	} {
		if f.v < 0 || f.v > f.bound {
			add("event_time."+f.name, "%d is out of range [0, %s %d]", f.v, f.bname, f.bound)
		}
	}
	if p := et.GetTimePath(); p != "" {
		switch {
		case len(p) > MaxTimePathBytes:
			add("event_time.time_path", "is %d bytes, over MaxTimePathBytes %d", len(p), MaxTimePathBytes)
		case strings.Contains(p, "\x00"):
			add("event_time.time_path", "%q holds a NUL byte", p)
		default:
			for i, s := range strings.Split(p, ".") {
				if s == "" {
					add("event_time.time_path", "%q: field %d is empty (a path is field names separated by dots, \"event.time\")", p, i)
					break
				}
			}
		}
	}
	if f := et.GetTimeFormat(); pb.TimeFormat_name[int32(f)] == "" {
		add("event_time.time_format", "%d is not a TimeFormat (%d to %d)", int32(f), int32(pb.TimeFormat_TIME_FORMAT_UNSPECIFIED), int32(pb.TimeFormat_TIME_FORMAT_RFC3339))
	}
}
