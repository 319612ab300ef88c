package taskmanager

import (
	"context"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/taskmanager/operators"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// BenchmarkPipelinedExchange measures records/s through one TM-to-TM gRPC stream: a producer
// writes b.N records into a PIPELINED partition of one TM; a client reads them over loopback.
func BenchmarkPipelinedExchange(b *testing.B) {
	cfg := DefaultConfig()
	cfg.ID = "bench"
	cfg.Logger = hclog.NewNullLogger()
	tm, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := tm.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer tm.Stop()
	key := partitionKey{job: "j", result: "r", index: 0, attempt: "p"}
	p := newResultPartition(key, produces("r", 0, 1, forward, pipelined))
	tm.parts.add(p)
	conn, err := tm.conns.peer(tm.DataAddr())
	if err != nil {
		b.Fatal(err)
	}
	stream, err := pb.NewDataServiceClient(conn).ReadPartition(context.Background(),
		&pb.ReadPartitionRequest{JobId: "j", ResultId: "r", ProducerAttemptId: "p", ConsumerAttemptId: "c"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if err := p.add(context.Background(), operators.Record{Key: int64(i), Value: int64(i), Seq: int64(i)}); err != nil {
				return
			}
		}
		p.finish()
	}()
	n := 0
	for {
		batch, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		n += len(batch.GetRecords())
		if batch.GetEndOfPartition() {
			break
		}
	}
	if n != b.N {
		b.Fatalf("received %d of %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkLocalChannel is the baseline: the same records through a buffered Go channel.
func BenchmarkLocalChannel(b *testing.B) {
	ch := make(chan operators.Record, pipelinedBuffer)
	go func() {
		for i := 0; i < b.N; i++ {
			ch <- operators.Record{Key: int64(i), Value: int64(i), Seq: int64(i)}
		}
		close(ch)
	}()
	n := 0
	for range ch {
		n++
	}
	if n != b.N {
		b.Fatalf("received %d of %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
