package jmserver_test

import (
	"sort"
	"testing"

	"github.com/jmcluster/jmcluster/jmserver"
	"github.com/jmcluster/jmcluster/transport"
)

// TestEveryJobMasterMethodHasAPolicyRow walks every service descriptor registered on a
// JobMaster replica's gRPC server (the one agent.JobMaster serves) and fails for a method
// without a row in transport.Policies, or with a row the edge cannot apply there.
// (taskmanager's TestEveryTaskManagerMethodHasAPolicyRow does the same for the other process.)
func TestEveryJobMasterMethodHasAPolicyRow(t *testing.T) {
	s, _ := jmserver.NewGRPCServer(jmserver.Deps{}, 0)
	for _, bad := range transport.Uncovered(s, true) {
		t.Error(bad)
	}
	var services []string
	methods := 0
	for name, info := range s.GetServiceInfo() {
		services = append(services, name)
		methods += len(info.Methods)
	}
	sort.Strings(services)
	for _, want := range []string{
		"jmcluster.v1.ClientService", "jmcluster.v1.OperatorService", "jmcluster.v1.JobMasterService",
		"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
	} {
		if i := sort.SearchStrings(services, want); i == len(services) || services[i] != want {
			t.Errorf("%s is not registered (registered: %v)", want, services)
		}
	}
	t.Logf("%d methods of %v, each with a policy row", methods, services)
}
