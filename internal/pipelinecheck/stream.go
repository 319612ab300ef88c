package pipelinecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WindowResult is the part of a window's JSON result (operator/window_state.go appendResult)
// a pipeline's check reads, and the ordinal a numbering user function adds
// (examples/wasm/ordinal; 0 when absent).
type WindowResult struct {
	Key     string `json:"key"`
	Start   int64  `json:"start"`
	Count   int64  `json:"count"`
	Sum     int64  `json:"sum"`
	Ordinal int64  `json:"ordinal"`
}

// Message is one message of a stream: its sequence, its Nats-Msg-Id header and its data.
type Message struct {
	Seq  uint64 `json:"seq"`
	ID   string `json:"id"`
	Data []byte `json:"data"`
}

// ReadStream reads every message the stream holds when it is called, in order, with an
// ordered consumer (nothing left on the server), within timeout.
func ReadStream(ctx context.Context, js jetstream.JetStream, stream string, timeout time.Duration) ([]Message, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	total := int(info.State.Msgs)
	if total == 0 {
		return nil, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	out := make([]Message, 0, total)
	for len(out) < total {
		batch, err := cons.Fetch(min(total-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", stream, err)
		}
		k := 0
		for m := range batch.Messages() {
			k++
			var seq uint64
			if md, err := m.Metadata(); err == nil {
				seq = md.Sequence.Stream
			}
			out = append(out, Message{Seq: seq, ID: m.Headers().Get(jetstream.MsgIDHeader), Data: append([]byte(nil), m.Data()...)})
		}
		if batch.Error() != nil {
			return nil, fmt.Errorf("stream %s: %w", stream, batch.Error())
		}
		if k == 0 {
			return nil, fmt.Errorf("stream %s: read %d of its %d messages, then none", stream, len(out), total)
		}
	}
	return out, nil
}

// ParseResult parses a window result.
func ParseResult(b []byte) (WindowResult, error) {
	var r WindowResult
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("message %q is not a window result: %w", b, err)
	}
	return r, nil
}
