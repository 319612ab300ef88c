package dataplane

import (
	"strings"
	"testing"
)

// TestAFailedProducersReleaseNamesItsFailure: a reader of a partition that its producer's
// failure released fails naming that failure, so a consumer's failure (which the JobMaster may
// see first) names the root cause; a release by a cancel says only that it was released.
func TestAFailedProducersReleaseNamesItsFailure(t *testing.T) {
	for _, c := range []struct {
		failure string
		want    string
	}{
		{`nats_source: stream "CLICKS": nats: stream not found`, `released by its producer, which failed: nats_source: stream "CLICKS": nats: stream not found`},
		{"", "released by its producer"},
	} {
		dp := &Plane{parts: newRegistry()}
		p := lonePartition("a")
		dp.parts.add(p)
		r, _, err := dp.readerOf(p, readReq("r", "a"), &countWaker{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.failure != "" {
			dp.ReleaseFailedAttempt("a", c.failure)
		} else {
			dp.ReleaseAttempt("a")
		}
		_, _, perr := r.poll(nil, 10)
		if perr == nil || !strings.HasSuffix(perr.Error(), c.want) {
			t.Fatalf("release with failure %q: the reader's error %v, want it to end with %q", c.failure, perr, c.want)
		}
	}
}
