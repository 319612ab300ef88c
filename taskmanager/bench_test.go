package taskmanager

import "testing"

// BenchmarkPipelinedExchange measures records/s through one TM-to-TM gRPC stream: a producer
// writes b.N records into a PIPELINED partition of one TM; a ReadPartition stream of the same
// TM reads them over loopback (pair_bench_test.go has the two-TM figures).
func BenchmarkPipelinedExchange(b *testing.B) {
	prod, _ := pairTMs(b)
	b.ReportMetric(grpcStreamThroughput(b, prod, prod, max(b.N, 1000)), "records/s")
}

// BenchmarkLocalChannel is the baseline: the same records through a buffered Go channel.
func BenchmarkLocalChannel(b *testing.B) {
	b.ReportMetric(goChannelThroughput(max(b.N, 1000)), "records/s")
}
