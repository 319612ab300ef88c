package operator

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The timings of publishing to JetStream.
const (
	// natsAckTimeout is how long a publish waits for its ack before it is sent again.
	natsAckTimeout = 10 * time.Second
	// natsRetryFirst and natsRetryMax bound the backoff between two attempts to publish
	// what the server did not acknowledge (doubling from the first).
	natsRetryFirst = 50 * time.Millisecond
	natsRetryMax   = 2 * time.Second
)

// natsWindow publishes messages asynchronously, at most maxPending awaiting their acks. A
// publish the server did not acknowledge for a reason that passes (the connection lost, no
// ack in time, JetStream not ready after a restart) is sent again after a backoff, alone, and
// once acknowledged every message after it in the window, under the same message ids, until
// it is acknowledged or ctx ends; a duplicate's ack counts as one.
type natsWindow struct {
	s       *natsSink
	q       []natsInflight
	retries int // failed attempts since the last ack
}

type natsInflight struct {
	m *nats.Msg
	f jetstream.PubAckFuture // nil: to be sent
}

// add publishes m, first waiting for the oldest ack while maxPending are awaited.
func (w *natsWindow) add(ctx context.Context, m *nats.Msg) error {
	for len(w.q) >= w.s.maxPending || w.resendDue() {
		if err := w.settleOldest(ctx); err != nil {
			return err
		}
	}
	w.q = append(w.q, natsInflight{m: m})
	f, err := w.s.js.PublishMsgAsync(m, natsPublishOpts...)
	if err != nil {
		return w.failed(ctx, err)
	}
	w.q[len(w.q)-1].f = f
	return nil
}

// drain waits until every message of the window is acknowledged.
func (w *natsWindow) drain(ctx context.Context) error {
	for len(w.q) > 0 {
		if err := w.settleOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

// resendDue reports whether the window is to be sent again (a publish failed in a way that
// passes): before a new message, so that the stream stores them in order.
func (w *natsWindow) resendDue() bool { return len(w.q) > 0 && w.q[0].f == nil }

// settleOldest waits for the oldest message's ack and removes it from the window, sending the
// window again when the ack failed in a way that passes.
func (w *natsWindow) settleOldest(ctx context.Context) error {
	for {
		if w.resendDue() {
			settled, err := w.resend(ctx)
			if err != nil || settled {
				return err
			}
			continue
		}
		f := w.q[0].f
		select {
		case <-f.Ok():
			w.q, w.retries = w.q[1:], 0
			return nil
		case err := <-f.Err():
			if err := w.failed(ctx, err); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// failed handles a publish that failed with err: one that passes marks the whole window to
// be sent again (after the backoff in resend); any other is returned.
func (w *natsWindow) failed(ctx context.Context, err error) error {
	if !natsRetryable(err) {
		return err
	}
	if w.retries%10 == 0 {
		w.s.log.Warn("nats_sink: publishing again what the server did not acknowledge", "stream", w.s.cfg.GetStream(),
			"messages", len(w.q), "attempt", w.retries+1, "error", err, "last_server_error", w.s.nc.LastError())
	}
	w.retries++
	for i := range w.q {
		w.q[i].f = nil
	}
	return ctx.Err()
}

// resend waits the backoff, then publishes the oldest message of the window again and, once
// the stream acknowledged it (settled), the others: a server that takes messages again from
// some point on (JetStream ready after a restart) stores them in order.
func (w *natsWindow) resend(ctx context.Context) (settled bool, err error) {
	d := natsRetryMax
	if w.retries < 8 {
		d = min(natsRetryFirst<<w.retries, natsRetryMax)
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return false, ctx.Err()
	}
	f, err := w.s.js.PublishMsgAsync(w.q[0].m, natsPublishOpts...)
	if err != nil {
		return false, w.failed(ctx, err)
	}
	select {
	case <-f.Ok():
		w.q, w.retries = w.q[1:], 0
	case err := <-f.Err():
		return false, w.failed(ctx, err)
	case <-ctx.Done():
		return false, ctx.Err()
	}
	for i := range w.q {
		f, err := w.s.js.PublishMsgAsync(w.q[i].m, natsPublishOpts...)
		if err != nil {
			return true, w.failed(ctx, err)
		}
		w.q[i].f = f
	}
	return true, nil
}

// natsPublishOpts: a publish that finds no JetStream is not sent again by the client (it would
// be on a timer of its own, after later messages): the window sends it again, in order.
var natsPublishOpts = []jetstream.PublishOpt{jetstream.WithRetryAttempts(0)}

// natsRetryable reports whether a publish that failed with err may succeed when sent again
// (the connection lost or reconnecting, no ack in time, JetStream not answering yet); any
// other error (a message over the server's limit, a stream refusing it) fails the commit.
func natsRetryable(err error) bool {
	for _, e := range []error{nats.ErrDisconnected, nats.ErrConnectionReconnecting, nats.ErrReconnectBufExceeded,
		nats.ErrTimeout, nats.ErrNoResponders, jetstream.ErrAsyncPublishTimeout, jetstream.ErrNoStreamResponse,
		jetstream.ErrTooManyStalledMsgs} {
		if errors.Is(err, e) {
			return true
		}
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 503
}
