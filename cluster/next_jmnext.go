//go:build jmnext

package cluster

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/jmcluster/jmcluster/fsm"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// The jmnext build (the later version of the mixed-version test): once established, a leader
// writes one command older replicas do not know, marked ignorable, as a later version adding an
// optional command would.
func init() {
	afterEstablish = func(ctx context.Context, n *Node, epoch uint64) {
		data, err := proto.Marshal(&pb.Command{Version: 1, Type: fsm.NextNoteType, Ignorable: true,
			Payload: []byte(fmt.Sprintf("leader %s at epoch %d", n.cfg.ID, epoch))})
		if err != nil {
			return
		}
		res, err := n.apply(ctx, data, n.cfg.EstablishTimeout)
		if err != nil {
			n.logger.Warn("writing the ignorable command of a newer version failed", "error", err)
			return
		}
		n.logger.Info("wrote an ignorable command of a newer version", "type", int32(fsm.NextNoteType), "index", res.Index, "epoch", epoch)
	}
}
