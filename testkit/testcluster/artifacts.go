package testcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// PutArtifact stores data in the cluster's artifact store through JobMaster j (the leader when
// nil), as `jmnode artifact put` does, retrying while the cluster cannot take it yet (no
// established leader, the artifact level not yet gossiped everywhere); it returns the
// artifact's sha256 and the response. Any other refusal fails the test.
func (c *Cluster) PutArtifact(t testing.TB, j *JM, data []byte) (string, *pb.PutArtifactResponse) {
	t.Helper()
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	var resp *pb.PutArtifactResponse
	WaitFor(t, 3*time.Minute, "PutArtifact "+sha[:12], func() (bool, string) {
		via := j
		if via == nil {
			via = c.Leader()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var err error
		resp, err = jmserver.UploadArtifact(ctx, pb.NewArtifactServiceClient(c.Conn(via.GRPCAddr)), bytes.NewReader(data), sha, int64(len(data)), nil)
		if code := status.Code(err); code != codes.OK && code != codes.Unavailable && code != codes.FailedPrecondition {
			t.Fatalf("PutArtifact through %s: %v", via.ID, err)
		}
		return err == nil, fmt.Sprint(err)
	})
	return sha, resp
}
