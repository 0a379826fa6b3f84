// Package sandbox is the Host Coordinator's driver of the sandbox
// participant: the Runtime Supervisor's process slot, the attached runsc it
// stages, and runsc's own sandbox and gofer children, with their
// cross-record store rules and runsc's state files.
//
// The coordinator drives it through Role: Begin once the generation is
// recorded, SupervisorStaged when the broker staged RS, SupervisorMessage
// for the HC↔RS reports this role owns (the attached runsc's
// StagedProcessOwnership, answered by ProcessOwnershipCommitAck, and
// SandboxReady), Commit once the other roles accepted SandboxReady (in
// the coordinator's one transaction of the publication),
// Release before RS is stopped (release intent), Clean once RS was reaped
// (clean with proof), and Recover for a dead generation at bootstrap.
//
// Nothing here signals a pid read from runsc's state file or runs a runsc
// command: absence is proven only through recorded pidfs identities
// (PidfsRecoveryMatch, through Config.AwaitAbsence) or, for a generation
// that never recorded them, through the state file's pids becoming free.
package sandbox
