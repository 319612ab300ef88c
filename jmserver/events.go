package jmserver

import (
	"bytes"
	"net/http"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// The web UI's live updates: /api/v1/events is a server-sent event stream. It sends the
// cluster (an event "cluster": ClusterStatus as /api/v1/cluster) and, with ?job=ID, the job's
// summary view (an event "job", as /api/v1/jobs/ID), each when it differs from the last one
// sent: when the replicated state changes, and at least every eventsPoll for what lives outside
// it (gossip, the TaskManager registry, leadership). No more often than eventsMinGap.
const (
	eventsPoll   = time.Second
	eventsMinGap = 200 * time.Millisecond
)

var eventJSON = protojson.MarshalOptions{UseProtoNames: true}

func serveEvents(w http.ResponseWriter, r *http.Request, d Deps) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	jobID := r.URL.Query().Get("job")
	var lastCluster, lastJob []byte
	send := func(event string, m proto.Message, last *[]byte) bool {
		b, err := eventJSON.Marshal(m)
		if err != nil || bytes.Equal(b, *last) {
			return false
		}
		*last = b
		_, _ = w.Write([]byte("event: " + event + "\ndata: "))
		_, _ = w.Write(b)
		_, _ = w.Write([]byte("\n\n"))
		return true
	}
	poll := time.NewTicker(eventsPoll)
	defer poll.Stop()
	for {
		changed := d.State.Changed()
		sent := send("cluster", ClusterView(r.Context(), d), &lastCluster)
		if jobID != "" {
			if resp, err := JobView(r.Context(), d, &pb.GetJobRequest{JobId: jobID}); err == nil {
				resp.AppliedIndex = 0 // changes with every entry, the job's view does not
				sent = send("job", resp, &lastJob) || sent
			} else {
				sent = send("job-error", &pb.GetJobResponse{ServedBy: err.Error()}, &lastJob) || sent
			}
		}
		if sent {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(eventsMinGap):
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-poll.C:
		}
	}
}
