package taskmanager

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/jmcluster/jmcluster/transport"
)

// TestEveryTaskManagerMethodHasAPolicyRow walks every service descriptor registered on a
// TaskManager's two gRPC servers (control and data) and fails for a method without a row in
// transport.Policies, or with a row that needs a JobMaster's guard (leader, gate, forwarding,
// write limit): a TaskManager serves every call where it lands.
func TestEveryTaskManagerMethodHasAPolicyRow(t *testing.T) {
	tm := newTM(t, "tm1", nil, nil)
	want := map[string]bool{"jmcluster.v1.TaskManagerService": false, "jmcluster.v1.DataService": false, "grpc.health.v1.Health": false}
	methods := 0
	for _, s := range []*grpc.Server{tm.grpcSrv, tm.dataSrv} {
		for _, bad := range transport.Uncovered(s, false) {
			t.Error(bad)
		}
		for name, info := range s.GetServiceInfo() {
			want[name] = true
			methods += len(info.Methods)
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("%s is not registered on either server", name)
		}
	}
	t.Logf("%d methods, each with a policy row", methods)
}
