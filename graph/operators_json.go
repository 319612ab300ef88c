package graph

import "github.com/jmcluster/jmcluster/transport/pb"

func validateJSONKeyBy(op *pb.Operator, env OperatorEnv, add addFunc)   {}
func validateJSONFilter(op *pb.Operator, env OperatorEnv, add addFunc)  {}
func validateJSONProject(op *pb.Operator, env OperatorEnv, add addFunc) {}
