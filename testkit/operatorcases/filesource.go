package operatorcases

import (
	"strings"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func files(f *pb.FileSource) *pb.Operator {
	return &pb.Operator{Kind: &pb.Operator_FileSource{FileSource: f}}
}

// fileSourceCases are the file source's: the glob, the poll interval and line bounds, event
// time only from a JSON field.
func fileSourceCases() []Case {
	const kind = "file_source"
	batch := pb.JobType_JOB_TYPE_BATCH
	return []Case{
		{Name: "file source", Kind: kind, Op: files(&pb.FileSource{Path: "/data/in/*.jsonl", PollIntervalMs: 500, KeyFileName: true, MaxLineBytes: 4096}), Wiring: Feeds},
		{Name: "relative file source in a batch job", Kind: kind, Op: files(&pb.FileSource{Path: "in/*.txt"}), JobType: batch, Wiring: Feeds},
		{Name: "file source with event time", Kind: kind, Op: &pb.Operator{Kind: &pb.Operator_FileSource{FileSource: &pb.FileSource{Path: "in/*"}}, EventTime: &pb.EventTime{TimePath: "ts"}}, Wiring: Feeds},
		{Name: "file source without path", Kind: kind, Op: files(&pb.FileSource{}), Wiring: Feeds, Field: "operator.file_source.path", Msg: "is empty"},
		{Name: "file source with a bad glob", Kind: kind, Op: files(&pb.FileSource{Path: "in/[a-"}), Wiring: Feeds, Field: "operator.file_source.path", Msg: `"in/[a-" is not a valid glob: syntax error in pattern`},
		{Name: "file source with a too long path", Kind: kind, Op: files(&pb.FileSource{Path: strings.Repeat("a", 4097)}), Wiring: Feeds, Field: "operator.file_source.path", Msg: "is 4097 bytes, over MaxFileSourcePathBytes 4096"},
		{Name: "file source polling too often", Kind: kind, Op: files(&pb.FileSource{Path: "*", PollIntervalMs: 9}), Wiring: Feeds, Field: "operator.file_source.poll_interval_ms", Msg: "9 is out of range [MinFileSourcePollMs 10, MaxFileSourcePollMs 3600000] (0: 1000)"},
		{Name: "file source polling too rarely", Kind: kind, Op: files(&pb.FileSource{Path: "*", PollIntervalMs: 3_600_001}), Wiring: Feeds, Field: "operator.file_source.poll_interval_ms", Msg: "3600001 is out of range"},
		{Name: "file source with negative line bound", Kind: kind, Op: files(&pb.FileSource{Path: "*", MaxLineBytes: -1}), Wiring: Feeds, Field: "operator.file_source.max_line_bytes", Msg: "-1 is out of range [0, MaxFileSourceLineBytes 67108864] (0: 1048576)"},
		{Name: "file source with too large line bound", Kind: kind, Op: files(&pb.FileSource{Path: "*", MaxLineBytes: 64<<20 + 1}), Wiring: Feeds, Field: "operator.file_source.max_line_bytes", Msg: "67108865 is out of range"},
		{Name: "file source with event time but no time path", Kind: kind, Op: &pb.Operator{Kind: &pb.Operator_FileSource{FileSource: &pb.FileSource{Path: "*"}}, EventTime: &pb.EventTime{}}, Wiring: Feeds, Field: "operator.event_time.time_path", Msg: "is empty: file_source's lines have no time of their own"},
		{Name: "file source with an input", Kind: kind, Op: files(&pb.FileSource{Path: "*"}), Wiring: Between, Msg: `source vertex "v" must have no inputs`},
	}
}
