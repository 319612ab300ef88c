package graph

import "github.com/jmcluster/jmcluster/transport/pb"

func validateWindow(op *pb.Operator, env OperatorEnv, add addFunc) {}
