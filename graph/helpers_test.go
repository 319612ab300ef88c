package graph

import "github.com/jmcluster/jmcluster/transport/pb"

func source(id string, p int32, count int64) *pb.JobVertex {
	return &pb.JobVertex{Id: id, Name: id, Parallelism: p, Operator: &pb.Operator{
		Kind: &pb.Operator_SequenceSource{SequenceSource: &pb.SequenceSource{Count: count, Keys: 4}},
	}}
}

func mapper(id string, p int32) *pb.JobVertex {
	return &pb.JobVertex{Id: id, Name: id, Parallelism: p, Operator: &pb.Operator{
		Kind: &pb.Operator_Map{Map: &pb.MapOperator{Multiply: 2}},
	}}
}

func sink(id string, p int32) *pb.JobVertex {
	return &pb.JobVertex{Id: id, Name: id, Parallelism: p, Operator: &pb.Operator{
		Kind: &pb.Operator_LogSink{LogSink: &pb.LogSink{}},
	}}
}

func fwd(s, t string) *pb.JobEdge {
	return &pb.JobEdge{Source: s, Target: t, Distribution: pb.Distribution_DISTRIBUTION_FORWARD,
		ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
}

func all(s, t string) *pb.JobEdge {
	return &pb.JobEdge{Source: s, Target: t, Distribution: pb.Distribution_DISTRIBUTION_ALL_TO_ALL,
		ResultType: pb.ResultType_RESULT_TYPE_PIPELINED}
}

func blocking(e *pb.JobEdge) *pb.JobEdge {
	e.ResultType = pb.ResultType_RESULT_TYPE_BLOCKING
	return e
}

func job(vs []*pb.JobVertex, es ...*pb.JobEdge) *pb.JobGraph {
	return &pb.JobGraph{
		JobId:    "0123456789abcdef0123456789abcdef",
		Name:     "test",
		Type:     pb.JobType_JOB_TYPE_STREAMING,
		Vertices: vs,
		Edges:    es,
	}
}

// pipeline is src(p) -FORWARD-> map(p) -ALL_TO_ALL-> sink(q).
func pipeline(p, q int32) *pb.JobGraph {
	return job([]*pb.JobVertex{source("src", p, 0), mapper("map", p), sink("sink", q)},
		fwd("src", "map"), all("map", "sink"))
}
