package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// Artifacts is the artifact service of a JM (the pipeline's WebAssembly module is uploaded
// through it).
func (p *Pool) Artifacts(node string) pb.ArtifactServiceClient {
	return pb.NewArtifactServiceClient(p.conns[node])
}

// PublishedClick is one line of the publisher's record: a click the server acknowledged, its
// message id, and whether it is one of the closing clicks (sent at the end to close every
// window: their own windows never close, and no check counts them). A late click (Click.Late)
// is in no window's total either.
type PublishedClick struct {
	pipelinecheck.Click
	ID      string `json:"id"`
	Closing bool   `json:"closing,omitempty"`
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Seed    int64
	Rate    int    // clicks per second
	Users   int    // distinct users: user-00 ...
	Subject string // clicks are published to Subject.<user>
	// Record gets one JSON line per acknowledged click (nil: none).
	Record io.Writer
	// LateEvery makes every LateEvery-th click, once StartLate was called, followed by a late
	// click of its user (0: none).
	LateEvery int
}

// Publisher publishes click events to a JetStream stream at a steady rate, each under a
// message id of its own (click-<n>) and tried again under the same id until the server
// acknowledges it, so a click is stored once; it keeps every acknowledged click. Event times
// are the wall clock's milliseconds, strictly increasing in publishing order, so the stream
// holds them in event-time order and none is late — but the late clicks StartLate turns on:
// under ids of their own (late-<n>), each at the event time of the first click minus
// LateBehind, in a window no on-time click falls in and that every window task's watermark has
// passed once a window result was committed (a restored window task keeps its checkpoint's
// watermark, so it drops them too; one restored without it counts them).
type Publisher struct {
	cfg PublisherConfig
	js  jetstream.JetStream
	rng *rand.Rand

	mu      sync.Mutex
	acked   []PublishedClick
	sent    int // message ids given: click-0 .. click-<sent-1>
	late    int // late message ids given: late-0 .. late-<late-1>
	lateOn  bool
	firstTS int64
	lastTS  int64
	err     error // the last publish that failed for good
}

// LateBehind is how far behind the first click a late click's event time is: ten seconds, five
// windows of the pipeline's two seconds.
const LateBehind = 10 * time.Second

// StartLate turns the late clicks on (PublisherConfig.LateEvery).
func (p *Publisher) StartLate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lateOn = true
}

// NewPublisher returns a publisher over js.
func NewPublisher(js jetstream.JetStream, cfg PublisherConfig) *Publisher {
	if cfg.Rate <= 0 {
		cfg.Rate = 50
	}
	if cfg.Users <= 0 {
		cfg.Users = 8
	}
	return &Publisher{cfg: cfg, js: js, rng: rand.New(rand.NewSource(cfg.Seed))}
}

// Run publishes until ctx ends; the publish under way then is finished first.
func (p *Publisher) Run(ctx context.Context) {
	t := time.NewTicker(time.Second / time.Duration(p.cfg.Rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c := pipelinecheck.Click{User: fmt.Sprintf("user-%02d", p.rng.Intn(p.cfg.Users)), Amount: 1 + p.rng.Int63n(9)}
		// A publish under way when ctx ends is seen through to its acknowledgement: given up,
		// it might be stored without being counted.
		err := p.publish(context.WithoutCancel(ctx), c, false)
		p.mu.Lock()
		late := err == nil && p.lateOn && p.cfg.LateEvery > 0 && p.sent%p.cfg.LateEvery == 0
		p.mu.Unlock()
		if late {
			err = p.publish(context.WithoutCancel(ctx), pipelinecheck.Click{User: c.User, Amount: c.Amount, Late: true}, false)
		}
		if err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
		}
	}
}

// Close publishes n clicks, one per user in turn, at event time at least after: the
// watermark they carry closes every window of the clicks before them.
func (p *Publisher) Close(ctx context.Context, n int, after int64) error {
	for i := 0; i < n; i++ {
		c := pipelinecheck.Click{User: fmt.Sprintf("user-%02d", i%p.cfg.Users), Amount: 1, TS: after}
		if err := p.publish(ctx, c, true); err != nil {
			return err
		}
	}
	return nil
}

// publish sends one click under its message id until the server acknowledges it (the same id
// again is stored once) or 30 s passed.
func (p *Publisher) publish(ctx context.Context, c pipelinecheck.Click, closing bool) error {
	p.mu.Lock()
	var pc PublishedClick
	if c.Late {
		c.TS = p.firstTS - LateBehind.Milliseconds()
		pc = PublishedClick{Click: c, ID: fmt.Sprintf("late-%d", p.late)}
		p.late++
	} else {
		c.TS = max(c.TS, time.Now().UnixMilli(), p.lastTS+1)
		if p.firstTS == 0 {
			p.firstTS = c.TS
		}
		p.lastTS = c.TS
		pc = PublishedClick{Click: c, ID: fmt.Sprintf("click-%d", p.sent), Closing: closing}
		p.sent++
	}
	p.mu.Unlock()
	b, _ := json.Marshal(c)
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.js.Publish(pctx, p.cfg.Subject+"."+c.User, b, jetstream.WithMsgID(pc.ID))
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("publish %s: %w", pc.ID, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acked = append(p.acked, pc)
	if p.cfg.Record != nil {
		line, _ := json.Marshal(pc)
		_, _ = p.cfg.Record.Write(append(line, '\n'))
	}
	return nil
}

// Acked returns every acknowledged click, in publishing order.
func (p *Publisher) Acked() []PublishedClick {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PublishedClick(nil), p.acked...)
}

// LastTS is the event time of the last click published.
func (p *Publisher) LastTS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastTS
}

// Err is the last publish that failed for good (nil: none).
func (p *Publisher) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// artifactChunk is the size of a PutArtifact message's bytes: fsm.ArtifactChunkSize (512
// KiB), which the suite may not import (docs/architecture.md's import rules).
const artifactChunk = 512 << 10

// PutArtifact uploads b (its sha256 sha) through node's PutArtifact, as `jmnode artifact put`
// does: a first message declaring the artifact, then its bytes in chunks. The server may
// answer before every chunk was sent (stored already, or refused): its answer is returned.
func (p *Pool) PutArtifact(ctx context.Context, node, sha string, b []byte) error {
	stream, err := p.Artifacts(node).PutArtifact(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.PutArtifactRequest{Sha256: sha, Size: int64(len(b))}); err != nil && !errors.Is(err, io.EOF) {
		return err
	} else if err == nil {
		for rest := b; len(rest) > 0; {
			n := min(len(rest), artifactChunk)
			if err := stream.Send(&pb.PutArtifactRequest{Data: rest[:n]}); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
			rest = rest[n:]
		}
	}
	_, err = stream.CloseAndRecv()
	return err
}
