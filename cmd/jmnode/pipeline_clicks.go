package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The clicks demo-pipeline publishes, and what the pipeline must write of them: per user and
// event-time minute, the count of clicks and the sum of their amounts.

// clickStart is the event time of the first click (2026-12-06T00:00:00Z).
const clickStart = int64(1796515200000)

// click is one event as published: {"user":"user-07","amount":3,"ts":1796515200020}.
type click struct {
	User   string `json:"user"`
	Amount int64  `json:"amount"`
	TS     int64  `json:"ts"`
}

// windowKey names one window row: a user and the start of its minute (unix ms).
type windowKey struct {
	user  string
	start int64
}

// windowTotal is a window row's values.
type windowTotal struct{ count, sum int64 }

// clickPlan is the n clicks of users over minutes of event time, in time order: a pure
// function of the seed, and the totals the pipeline must produce from them.
type clickPlan struct {
	clicks []click
	totals map[windowKey]windowTotal
}

func planClicks(seed uint64, n, users, minutes int) clickPlan {
	r := mrand.New(mrand.NewPCG(seed, seed^0x5eed))
	step := int64(minutes) * 60000 / int64(n)
	p := clickPlan{clicks: make([]click, n), totals: map[windowKey]windowTotal{}}
	for i := range p.clicks {
		c := click{User: fmt.Sprintf("user-%02d", r.IntN(users)), Amount: 1 + r.Int64N(9), TS: clickStart + int64(i)*step}
		p.clicks[i] = c
		k := windowKey{c.User, c.TS - c.TS%60000}
		t := p.totals[k]
		t.count++
		t.sum += c.Amount
		p.totals[k] = t
	}
	return p
}

// sums is the clicks and amounts of totals.
func sums(totals map[windowKey]windowTotal) (clicks, amount int64) {
	for _, t := range totals {
		clicks += t.count
		amount += t.sum
	}
	return clicks, amount
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

// compareTotals says how got differs from want: every window once with its values, none else.
// dup counts the windows got holds more than once.
func compareTotals(want map[windowKey]windowTotal, got map[windowKey][]windowTotal) (problems []string) {
	for k, w := range want {
		g := got[k]
		switch {
		case len(g) == 0:
			problems = append(problems, fmt.Sprintf("missing %s %d (want %d clicks, amount %d)", k.user, k.start, w.count, w.sum))
		case len(g) > 1:
			problems = append(problems, fmt.Sprintf("%s %d written %d times", k.user, k.start, len(g)))
		case g[0] != w:
			problems = append(problems, fmt.Sprintf("%s %d: %d clicks, amount %d; want %d, %d", k.user, k.start, g[0].count, g[0].sum, w.count, w.sum))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("unexpected window %s %d", k.user, k.start))
		}
	}
	sort.Strings(problems)
	return problems
}

// randomSecret is a password for the demo's servers.
func randomSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
