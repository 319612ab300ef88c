package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jmcluster/jmcluster/internal/pipelinecheck"
)

// The clicks demo-pipeline publishes, and what the pipeline must write of them: per user and
// event-time minute, the count of clicks and the sum of their amounts (the types and the
// comparison are internal/pipelinecheck's, shared with the fault suite's pipeline workload).

// clickStart is the event time of the first click (2026-12-06T00:00:00Z).
const clickStart = int64(1796515200000)

// clickPlan is the n clicks of users over minutes of event time, in time order: a pure
// function of the seed, and the totals the pipeline must produce from them.
type clickPlan struct {
	clicks []pipelinecheck.Click
	totals map[pipelinecheck.WindowKey]pipelinecheck.Total
}

func planClicks(seed uint64, n, users, minutes int) clickPlan {
	r := mrand.New(mrand.NewPCG(seed, seed^0x5eed))
	step := int64(minutes) * 60000 / int64(n)
	p := clickPlan{clicks: make([]pipelinecheck.Click, n)}
	for i := range p.clicks {
		p.clicks[i] = pipelinecheck.Click{User: fmt.Sprintf("user-%02d", r.IntN(users)), Amount: 1 + r.Int64N(9), TS: clickStart + int64(i)*step}
	}
	p.totals = pipelinecheck.Totals(p.clicks, 60000)
	return p
}

// publishClicks publishes the plan's clicks in order, each with the message id click-<i> so a
// publish tried again is stored once, at rate per second; published counts what the server
// acknowledged. The stream's sequences are then 1..n.
func publishClicks(ctx context.Context, js jetstream.JetStream, p clickPlan, rate int, published *atomic.Int64) error {
	const tick = 20 * time.Millisecond
	perTick := max(1, rate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	defer t.Stop()
	for i := 0; i < len(p.clicks); {
		end := min(len(p.clicks), i+perTick)
		futures := make([]jetstream.PubAckFuture, 0, end-i)
		for j := i; j < end; j++ {
			b, _ := json.Marshal(p.clicks[j])
			f, err := js.PublishAsync(fmt.Sprintf("clicks.%s", p.clicks[j].User), b, jetstream.WithMsgID(fmt.Sprintf("click-%d", j)))
			if err != nil {
				return fmt.Errorf("publish click %d: %w", j, err)
			}
			futures = append(futures, f)
		}
		for k, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("publish click %d: %w", i+k, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		published.Store(int64(end))
		i = end
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// randomSecret is a password for the demo's servers.
func randomSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
