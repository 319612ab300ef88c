package client

import (
	"context"
	"math/rand"
	"sync"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/history"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// GeneratorConfig shapes the client workload.
type GeneratorConfig struct {
	Processes int           // concurrent client processes; 0 means 3
	Seed      int64         // seeds every choice
	OpTimeout time.Duration // per operation; 0 means 3s
	MinPause  time.Duration // between two operations of a process; 0 means 50ms
	MaxPause  time.Duration // 0 means 300ms
	// JobRate is the records per second of the bounded jobs' sources; 0 means
	// DefaultJobRate. At 5 a job runs 2-10 s, longer than a failover takes.
	JobRate int64
}

// Generator runs client processes that submit, cancel and read jobs against random JMs and
// record every operation.
type Generator struct {
	cfg  GeneratorConfig
	pool *Pool
	rec  *history.Recorder

	mu  sync.Mutex
	ids []string // every job id a process tried to submit
}

// NewGenerator returns a generator over pool recording to rec.
func NewGenerator(cfg GeneratorConfig, pool *Pool, rec *history.Recorder) *Generator {
	if cfg.Processes <= 0 {
		cfg.Processes = 3
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 3 * time.Second
	}
	if cfg.MinPause <= 0 {
		cfg.MinPause = 50 * time.Millisecond
	}
	if cfg.MaxPause <= cfg.MinPause {
		cfg.MaxPause = cfg.MinPause + 250*time.Millisecond
	}
	return &Generator{cfg: cfg, pool: pool, rec: rec}
}

// Run drives the processes until ctx ends. Every process finishes its operation in flight
// (bounded by the op timeout) before Run returns, so no invoke is left open.
func (g *Generator) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for p := 0; p < g.cfg.Processes; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			g.process(ctx, p)
		}(p)
	}
	wg.Wait()
}

// JobIDs returns every id a submission was attempted for.
func (g *Generator) JobIDs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.ids...)
}

func (g *Generator) process(ctx context.Context, p int) {
	rng := rand.New(rand.NewSource(g.cfg.Seed*1000 + int64(p)))
	for ctx.Err() == nil {
		node := g.pool.nodes[rng.Intn(len(g.pool.nodes))]
		switch x := rng.Intn(100); {
		case x < 35:
			g.submit(p, node, rng)
		case x < 50:
			if id, ok := g.pick(rng); ok {
				g.cancel(p, node, id)
			}
		default:
			id, ok := g.pick(rng)
			if !ok || rng.Intn(10) == 0 {
				id = NewJobID(rng) // a job nobody submitted: must read as not found
			}
			g.read(p, node, id)
		}
		pause := g.cfg.MinPause + time.Duration(rng.Int63n(int64(g.cfg.MaxPause-g.cfg.MinPause)))
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (g *Generator) pick(rng *rand.Rand) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ids) == 0 {
		return "", false
	}
	// Favour recent jobs: they are the ones still running.
	n := len(g.ids)
	lo := n - 8
	if lo < 0 || rng.Intn(4) == 0 {
		lo = 0
	}
	return g.ids[lo+rng.Intn(n-lo)], true
}

func (g *Generator) invoke(p int, f history.F, id string) {
	g.rec.Add(history.Op{Process: p, Type: history.Invoke, F: f, JobID: id, Time: time.Now().UnixNano()})
}

func (g *Generator) complete(p int, f history.F, id string, t history.Type, v *history.Value, err error) {
	op := history.Op{Process: p, Type: t, F: f, JobID: id, Value: v, Time: time.Now().UnixNano()}
	if err != nil {
		op.Error = err.Error()
	}
	g.rec.Add(op)
}

func (g *Generator) submit(p int, node string, rng *rand.Rand) {
	id := NewJobID(rng)
	job := BoundedJob(id, rng, g.cfg.JobRate)
	g.mu.Lock()
	g.ids = append(g.ids, id)
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.OpTimeout)
	defer cancel()
	g.invoke(p, history.Submit, id)
	_, err := g.pool.Client(node).SubmitJob(ctx, &pb.SubmitJobRequest{JobGraph: job})
	t, v := Classify(err)
	g.complete(p, history.Submit, id, t, v, err)
}

func (g *Generator) cancel(p int, node, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.OpTimeout)
	defer cancel()
	g.invoke(p, history.Cancel, id)
	resp, err := g.pool.Client(node).CancelJob(ctx, &pb.CancelJobRequest{JobId: id})
	t, v := Classify(err)
	if err == nil {
		v = &history.Value{Status: resp.GetStatus().String()}
	}
	g.complete(p, history.Cancel, id, t, v, err)
}

func (g *Generator) read(p int, node, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.OpTimeout)
	defer cancel()
	g.invoke(p, history.Read, id)
	resp, err := g.pool.Client(node).GetJob(ctx, &pb.GetJobRequest{JobId: id, Consistent: true})
	t, v := ClassifyRead(resp, err)
	g.complete(p, history.Read, id, t, v, err)
}
