package graph

import "github.com/jmcluster/jmcluster/transport/pb"

func validateWasm(op *pb.Operator, env OperatorEnv, add addFunc) {}
