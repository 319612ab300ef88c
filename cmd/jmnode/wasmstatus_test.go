package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// TestJobStatusNamesTheArtifactOfEachWasmVertex: the summary of `jmnode job status` names the
// module of each wasm vertex by its short hash, with its function and kind.
func TestJobStatusNamesTheArtifactOfEachWasmVertex(t *testing.T) {
	sha := strings.Repeat("f1cd8ff21a04", 5) + "abcd"
	resp := &pb.GetJobResponse{
		Summary: &pb.JobSummary{JobId: "j", Name: "fraud"},
		Job: &pb.JobRecord{JobGraph: &pb.JobGraph{Vertices: []*pb.JobVertex{
			{Id: "payments", Operator: &pb.Operator{Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{}}}},
			{Id: "fraud", Operator: &pb.Operator{Kind: &pb.Operator_Wasm{Wasm: &pb.WasmOperator{Artifact: sha, Function: "detect", Kind: pb.WasmKind_WASM_KIND_PROCESS}}}},
		}}},
	}
	var out bytes.Buffer
	printSummary(&out, resp)
	if want := "wasm fraud: artifact f1cd8ff21a04, function detect, PROCESS\n"; !strings.Contains(out.String(), want) {
		t.Errorf("job status:\n%s\nwant the line %q", out.String(), want)
	}
	if strings.Contains(out.String(), "wasm payments") {
		t.Errorf("a built-in vertex named as wasm:\n%s", out.String())
	}
}
