package transport

import (
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/jmcluster/jmcluster/transport/pb"
)

// Leadership says which node of a JobMaster cluster may serve a call.
type Leadership int

const (
	// Local: whichever node the call reaches serves it (every method of a TaskManager).
	Local Leadership = iota
	// Leader: only the established leader (the node whose EstablishLeadership entry is
	// committed); elsewhere the call is refused NOT_LEADER, or forwarded when the row says so.
	Leader
	// LeaderIfConsistent: a read served where it lands, unless the request asks to be
	// consistent (GetConsistent() is true): then it is served by the established leader after
	// Raft confirms its leadership, as for Leader.
	LeaderIfConsistent
)

func (l Leadership) String() string {
	switch l {
	case Local:
		return "local"
	case Leader:
		return "leader"
	case LeaderIfConsistent:
		return "leader-if-consistent"
	}
	return "leadership(?)"
}

// Policy is one method's row of the edge's table, applied by the one interceptor every gRPC
// server of both processes runs (Edge), before the handler.
type Policy struct {
	// Gated: refused RECONCILING while the leader's RPC gate is closed (reconciliation in
	// progress). A gated method needs the established leader.
	Gated bool
	// Leader: which node may serve the call.
	Leader Leadership
	// Forward: a node that may not serve the call because it is not the leader forwards it to
	// the leader (once: a forwarded call is never forwarded again) instead of refusing it. With
	// Leader set the edge forwards before the handler runs; with Local the handler runs and the
	// call is forwarded when it says this node is not the Raft leader. Unary methods only.
	Forward bool
	// Limited: counted against the caller's write rate limit on the node it called, before
	// anything else (a forwarded call was counted by the node that forwarded it).
	Limited bool
	// Roles: the certificate roles allowed to call the method (security.Role), checked before
	// anything else on a server with mutual TLS: a caller of another role is refused
	// PERMISSION_DENIED. Every row names at least one (Uncovered checks). A call a JobMaster
	// forwards is checked against the role of the caller it forwards for. A plaintext server
	// checks nothing.
	Roles []Role
}

// The role sets of the rows. Operators may do anything a reader may; JobMasters forward
// calls for their callers (checked against the caller's role on the leader) and call
// NodeInfo and RaftJoin themselves (bootstrap discovery, joining).
var (
	operator       = []Role{RoleOperator}
	readers        = []Role{RoleOperator, RoleReader}
	readersAndTMs  = []Role{RoleOperator, RoleReader, RoleTaskManager}
	readersAndJMs  = []Role{RoleOperator, RoleReader, RoleJobMaster}
	operatorAndJMs = []Role{RoleOperator, RoleJobMaster}
	taskManagers   = []Role{RoleTaskManager}
	jobMasters     = []Role{RoleJobMaster}
	anyRole        = []Role{RoleJobMaster, RoleTaskManager, RoleOperator, RoleReader}
)

// Policies is the table: one row per method of every service either process registers,
// keyed by the full method name. A call to a method without a row is refused (Uncovered
// finds such methods, and both processes refuse to start with one).
var Policies = map[string]Policy{
	// ClientService (JobMaster): users and the jmnode client.
	pb.ClientService_SubmitJob_FullMethodName:     {Gated: true, Leader: Leader, Forward: true, Limited: true, Roles: operator},
	pb.ClientService_CancelJob_FullMethodName:     {Gated: true, Leader: Leader, Forward: true, Limited: true, Roles: operator},
	pb.ClientService_GetJob_FullMethodName:        {Leader: LeaderIfConsistent, Forward: true, Roles: readers},
	pb.ClientService_ListJobs_FullMethodName:      {Leader: LeaderIfConsistent, Forward: true, Roles: readers},
	pb.ClientService_WatchJob_FullMethodName:      {Roles: readers},
	pb.ClientService_ClusterStatus_FullMethodName: {Roles: readersAndTMs},

	// OperatorService (JobMaster): operators, and bootstrap discovery between JobMasters.
	pb.OperatorService_NodeInfo_FullMethodName:               {Roles: readersAndJMs},
	pb.OperatorService_RaftPeers_FullMethodName:              {Roles: readers},
	pb.OperatorService_RaftJoin_FullMethodName:               {Forward: true, Roles: operatorAndJMs},
	pb.OperatorService_RaftRemove_FullMethodName:             {Forward: true, Roles: operator},
	pb.OperatorService_RaftTransferLeadership_FullMethodName: {Forward: true, Roles: operator},
	pb.OperatorService_Snapshot_FullMethodName:               {Roles: operator},
	// A consistent copy from the established leader, or from a Raft leader whose state is
	// behind the TaskManagers (the handler checks; a follower refuses it NOT_LEADER, naming
	// the leader; it is a stream, so it is not forwarded).
	pb.OperatorService_SnapshotSave_FullMethodName: {Roles: operator},
	// Served by the Raft leader, established or not: a leader whose state is behind the
	// TaskManagers never establishes, and restoring is how it gets out (the handler refuses
	// NOT_LEADER elsewhere; a stream is not forwarded).
	pb.OperatorService_SnapshotRestore_FullMethodName: {Roles: operator},
	// A drain is a write like a job's: to the established leader, gate open, rate limited.
	pb.OperatorService_DrainTaskManager_FullMethodName: {Gated: true, Leader: Leader, Forward: true, Limited: true, Roles: operator},
	pb.OperatorService_Members_FullMethodName:          {Roles: readers},
	pb.OperatorService_StateHash_FullMethodName:        {Roles: readers},
	// The keyring fan-out: the JobMaster that serves it asks every member (GossipService).
	pb.OperatorService_GossipKeyring_FullMethodName: {Roles: operator},

	// JobMasterService (JobMaster): TaskManagers. Registration and heartbeats are served
	// while the gate is closed: reconciliation needs them.
	pb.JobMasterService_RegisterTaskManager_FullMethodName:       {Leader: Leader, Roles: taskManagers},
	pb.JobMasterService_Heartbeat_FullMethodName:                 {Leader: Leader, Roles: taskManagers},
	pb.JobMasterService_UpdateTaskExecutionState_FullMethodName:  {Gated: true, Leader: Leader, Roles: taskManagers},
	pb.JobMasterService_ScheduleOrUpdateConsumers_FullMethodName: {Gated: true, Leader: Leader, Roles: taskManagers},
	pb.JobMasterService_RequestPartitionState_FullMethodName:     {Gated: true, Leader: Leader, Roles: taskManagers},
	// Checkpoint acknowledgements and declines wait in the TM's outbox while the gate is
	// closed, like state updates: a new leader learns of acknowledgements it missed from the
	// reports (docs/checkpoints.md).
	pb.JobMasterService_AcknowledgeCheckpoint_FullMethodName: {Gated: true, Leader: Leader, Roles: taskManagers},
	pb.JobMasterService_DeclineCheckpoint_FullMethodName:     {Gated: true, Leader: Leader, Roles: taskManagers},

	// TaskManagerService (TaskManager): the JobMaster leader. Fencing by leader epoch is the
	// handlers' business: it needs the request.
	pb.TaskManagerService_SubmitTask_FullMethodName:               {Roles: jobMasters},
	pb.TaskManagerService_SubmitTasks_FullMethodName:              {Roles: jobMasters},
	pb.TaskManagerService_CancelTask_FullMethodName:               {Roles: jobMasters},
	pb.TaskManagerService_UpdatePartitionInfo_FullMethodName:      {Roles: jobMasters},
	pb.TaskManagerService_RequestReport_FullMethodName:            {Roles: jobMasters},
	pb.TaskManagerService_AcknowledgeTerminal_FullMethodName:      {Roles: jobMasters},
	pb.TaskManagerService_TriggerCheckpoint_FullMethodName:        {Roles: jobMasters},
	pb.TaskManagerService_NotifyCheckpointComplete_FullMethodName: {Roles: jobMasters},
	pb.TaskManagerService_NotifyCheckpointAborted_FullMethodName:  {Roles: jobMasters},

	// ArtifactService (JobMaster): operators store and remove artifacts, readers list them,
	// TaskManagers (and readers) fetch them. PutArtifact is a client stream: Local, and its
	// handler serves it on the established leader (the gate open) or relays it to the leader.
	// GetArtifact is served from the replica's own state, so a TaskManager fetches from any.
	pb.ArtifactService_PutArtifact_FullMethodName:    {Roles: operator},
	pb.ArtifactService_ListArtifacts_FullMethodName:  {Leader: LeaderIfConsistent, Forward: true, Roles: readers},
	pb.ArtifactService_RemoveArtifact_FullMethodName: {Gated: true, Leader: Leader, Forward: true, Limited: true, Roles: operator},
	pb.ArtifactService_GetArtifact_FullMethodName:    {Roles: readersAndTMs},

	// DataService (TaskManager): other TaskManagers.
	pb.DataService_ReadPartition_FullMethodName: {Roles: taskManagers},
	pb.DataService_Exchange_FullMethodName:      {Roles: taskManagers},

	// PeerService (TaskManager): other TaskManagers of the pool (the isolation rule).
	pb.PeerService_LeaderContact_FullMethodName: {Roles: taskManagers},

	// GossipService (both processes): this node's gossip keyring, asked by the JobMaster that
	// fans a keyring change out for an operator (checked against the operator's role).
	pb.GossipService_Keyring_FullMethodName: {Roles: operatorAndJMs},

	// Health and reflection, on every server of both processes.
	healthpb.Health_Check_FullMethodName:                                   {Roles: anyRole},
	healthpb.Health_List_FullMethodName:                                    {Roles: anyRole},
	healthpb.Health_Watch_FullMethodName:                                   {Roles: anyRole},
	reflectionpb.ServerReflection_ServerReflectionInfo_FullMethodName:      {Roles: readers},
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: {Roles: readers},
}

// needsLeader reports whether a call with policy p, whose request asks (or not) to be
// consistent, needs the established leader.
func (p Policy) needsLeader(consistent bool) bool {
	return p.Gated || p.Leader == Leader || (p.Leader == LeaderIfConsistent && consistent)
}
