package taskmanager

import (
	"errors"

	"github.com/jmcluster/jmcluster/dataplane"
)

var (
	// ErrNoLeader: no JobMaster leader is known yet.
	ErrNoLeader = errors.New("no jobmaster leader known")
	// ErrStaleLeader: the contacted JobMaster has an epoch lower than one this TM has seen.
	ErrStaleLeader = errors.New("jobmaster epoch is stale")
	// ErrInvalidTask: a TaskDeploymentDescriptor is invalid.
	ErrInvalidTask = errors.New("invalid task deployment descriptor")
	// ErrPartitionReleased: a result partition was released (producer failed, cancelled or
	// the TM stopped) while it was being written or read.
	ErrPartitionReleased = dataplane.ErrPartitionReleased
	// ErrStopped: the TaskManager is stopping.
	ErrStopped = errors.New("taskmanager stopped")
)
