package jmserver

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// UploadArtifact is the client side of PutArtifact: it declares the artifact (sha256, size),
// sends size bytes read from r in chunks of fsm.ArtifactChunkSize, calling progress (if not
// nil) with the bytes sent after each, and returns the answer. The server may answer before
// every chunk was sent (the artifact was stored already, or it was refused): the answer or the
// refusal is returned.
func UploadArtifact(ctx context.Context, c pb.ArtifactServiceClient, r io.Reader, sha string, size int64, progress func(sent int64)) (*pb.PutArtifactResponse, error) {
	stream, err := c.PutArtifact(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&pb.PutArtifactRequest{Sha256: sha, Size: size}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	} else if err == nil {
		buf := make([]byte, fsm.ArtifactChunkSize)
		var sent int64
		for sent < size {
			n, rerr := io.ReadFull(r, buf[:min(int64(len(buf)), size-sent)])
			if rerr != nil {
				_ = stream.CloseSend()
				return nil, fmt.Errorf("reading the artifact after %d of %d bytes: %w", sent, size, rerr)
			}
			if err := stream.Send(&pb.PutArtifactRequest{Data: buf[:n]}); err != nil {
				if errors.Is(err, io.EOF) {
					break // answered early: CloseAndRecv has it
				}
				return nil, err
			}
			sent += int64(n)
			if progress != nil {
				progress(sent)
			}
		}
	}
	return stream.CloseAndRecv()
}
