package graph

import "github.com/jmcluster/jmcluster/transport/pb"

// validateEventTime checks op's event_time: sources only.
func validateEventTime(op *pb.Operator, k OperatorKind, add addFunc) {
	if op.GetEventTime() != nil && k.Role != RoleSource {
		add("event_time", "is for sources only (%s is a %s)", k.Name, k.Role)
	}
}
