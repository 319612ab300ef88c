package failpoint

// The failpoints, one row each: its Go name, its name in JMNODE_FAILPOINTS and what it does.
// Adding one is a row here and its call site (failpoint.Enabled for a switch,
// failpoint.Inject for a hook); `jmnode failpoints` lists this table.
var (
	// Switches: a deliberately broken safety mechanism, checked with Enabled.

	EarlyGate             = newSwitch("early-gate", "the leader opens its RPC gate and starts scheduling before the reconciled graph is committed")
	RestartOnFailover     = newSwitch("restart-on-failover", "a new leader fails every execution instead of reconciling (what Flink does today)")
	StuckReconciling      = newSwitch("stuck-reconciling", "a reconciliation with jobs to reconcile never commits: they stay RECONCILING, the gate closed")
	AckBeforeCommit       = newSwitch("ack-before-commit", "SubmitJob and CancelJob are acknowledged at once and committed 500 ms later")
	NondeterministicApply = newSwitch("nondeterministic-apply", "Apply stamps every submitted job with this replica's own clock")
	DisableFencing        = newSwitch("disable-fencing", "a TaskManager accepts calls whose leader epoch is below one it has seen")
	NoIncarnation         = newSwitch("no-incarnation", "the leader ignores TaskManager incarnations: a restarted TM is taken for the process that died (its gossip death and loss still count against it)")
	CommitBeforeComplete  = newSwitch("commit-before-complete", "a checksum sink of a checkpointed job commits its output at the checkpoint's barrier, before the checkpoint completed")
	CompleteTwice         = newSwitch("complete-twice", "the leader proposes each COMPLETE_CHECKPOINT twice and the FSM applies the second (its guard against completing a completed checkpoint is off): the checkpoint is listed completed twice and counted twice")
	OutboxDoubleWorker    = newSwitch("outbox-double-worker", "a TaskManager's outbox starts a second sender for an attempt whose sender just sent its last message: duplicate and out-of-order updates")

	// A JobMaster's store verification (cluster/verify.go).
	SkipStoreVerify = newSwitch("skip-store-verify", "a JobMaster starts without verifying its raft.db and newest snapshot (checksums of log entries, bolt's consistency check, the snapshot's CRC): it serves whatever its damaged files hold")
	// A damaged checkpoint (docs/checkpoints.md).
	RestoreUnverified = newSwitch("restore-unverified", "a TaskManager restoring a task reads its checkpointed state without checking the CRC-32C (the header's or the acknowledged one): a damaged state is restored as if it were whole")
	// A starved leader (jobmaster/starvation.go).
	StarvedLeaderFences = newSwitch("starved-leader-fences", "a leader starved of CPU keeps counting its TaskManagers' silence while it is starved and never hands leadership over (its starvation guard is off)")
	// Raft membership (cluster/bootstrap.go).

	RemovedRejoins = newSwitch("removed-rejoins", "a JobMaster that knows no leader for 3 s asks its --join addresses to add it as a voter again, although it has Raft state: a member removed while it was cut off rejoins by itself")
	// Planted bugs of the records' path (windows, watermarks, the PostgreSQL sink, WebAssembly
	// state): each caught by the pipeline workload's checkers after a restore.

	WindowStateUnchecked    = newSwitch("window-state-unchecked", "the window operator's snapshot leaves its open windows out (timers and watermark kept): a restored window counts only the records after the checkpoint")
	WatermarkRegress        = newSwitch("watermark-regress", "a restored keyed transform's watermark is not restored: until its inputs' first watermark it takes records behind the checkpoint's watermark, and a window counts late records it had dropped and fires again")
	PostgresCommitAtBarrier = newSwitch("postgres-commit-at-barrier", "a checkpointed postgres_sink COMMITs its transaction at the barrier instead of PREPARE TRANSACTION and COMMIT PREPARED once the checkpoint completed: rows of a checkpoint that never completes are replayed and written again")
	WasmStateLost           = newSwitch("wasm-state-lost", "the wasm operator's snapshot holds its keyed state as the task opened with it: a restore loses every state write since the task started")

	// Disk faults of a JobMaster replica: every write of the Raft log, the stable store and a
	// snapshot (cluster/faultstore.go). Switches too, but an injected fault the system must
	// survive, not a broken mechanism: `jepsen selftest` has no row for them.

	DiskFailBeforeWrite = newFault("disk-fail-before-write", "every Raft log, stable-store and snapshot write of a JobMaster fails before it is made (an I/O error)")
	DiskFailAfterWrite  = newFault("disk-fail-after-write", "every Raft log, stable-store and snapshot write of a JobMaster is made, then reported failed")
	DiskPanicMidWrite   = newFault("disk-panic-mid-write", "a JobMaster's Raft log write stores the first half of its entries, then the process panics (a crash mid-write)")

	// A lying disk (cluster/lostwrites.go).
	DiskLoseUnsynced = newFault("disk-lose-unsynced", "a JobMaster's Raft log and stable-store writes are acknowledged at once, kept in memory and written 1-2 s later: a kill -9 loses what was acknowledged and not yet written (a disk that lies about fsync)")
	// Values: an injected fault with a duration, written NAME=DUR (failpoint.Duration).
	ClockOffset = newValue("clock-offset", "this process's wall clock (failpoint.Now: a TaskManager's sink commit stamps) reads DUR ahead of the host's, or behind when negative: a stepped clock; Go's monotonic clock, which timeouts use, does not move")

	// Hooks: a point between a commit and the RPC it guards (or another window a fault can
	// land in), where Inject pauses.

	BeforeDeployingCommit    = newHook("before-deploying-commit", "after a deployment's attempts are committed SCHEDULED, before their DEPLOYING commit (nothing was submitted yet)")
	BeforeSubmitTask         = newHook("before-submit-task", "after an attempt's DEPLOYING commit, before its SubmitTask is sent")
	OutboxAfterSend          = newHook("outbox-after-send", "after a TaskManager's outbox removed a delivered message from its queue, before it looks at the queue again")
	DiskWrite                = newHook("disk-write", "before each Raft log, stable-store and snapshot write of a JobMaster: pause(disk-write)=200ms is a slow disk")
	BeforeLeaderStop         = newHook("before-leader-stop", "after Raft reported this replica's leadership lost, before its leader work is stopped (the term's context cancelled): a deposed leader that has not noticed yet, which TaskManager fencing guards against")
	BeforeReconcileCommit    = newHook("before-reconcile-commit", "after a reconciliation merged the TaskManagers' reports, before it commits the reconciled graph (the gate is still closed)")
	BeforeTriggerCheckpoint  = newHook("before-trigger-checkpoint", "after a checkpoint's TRIGGER_CHECKPOINT commit, before its TriggerCheckpoint calls are sent (no barrier was injected)")
	BeforeAckCheckpoint      = newHook("before-ack-checkpoint", "after TaskManagers' checkpoint acknowledgements were checked and queued, before their ACK_CHECKPOINT commit (the TMs' calls wait)")
	BeforeCompleteCheckpoint = newHook("before-complete-checkpoint", "after the FSM holds every acknowledgement of a checkpoint, before its COMPLETE_CHECKPOINT commit (no task was told)")
	BeforeCancelTask         = newHook("before-cancel-task", "after an attempt's CANCELING commit, before its CancelTask is sent (also a cancel of an attempt a TM reported that the graph does not own)")
)
