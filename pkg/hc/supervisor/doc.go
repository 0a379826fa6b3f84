// Package supervisor is the Host Coordinator's driver of the Runtime
// Supervisor's launch and lifetime: the acquisition of RS through the
// coordinator's broker into new user, mount and network namespaces (with
// the developer's full subordinate id map), held at the broker's barrier
// until the generation's Trust Anchor exists; RS's inputs sealed at the
// stage (the derived network policy and RS's protocol credential); the
// HC↔RS channel and the lifetime pipe RS watches; and stopping, waiting
// for and — past the bound — killing RS.
//
// The coordinator drives one Driver per generation:
//
//	Spawn          from init: clone, wrapper start and id maps proceed while
//	               the store opens and recovery runs; RS waits at its barrier
//	ReleaseStage   once the Trust Anchor exists: Config.Inputs, the sealed
//	               memfds, Config.Staged (the durable staged slot), release
//	Finish         from the generation's start: waits for the acquisition
//	               and hands the channel and the lifetime pipe over
//	Abort          when the coordinator did not start
//	Send, Recv     the HC↔RS exchange (the coordinator's phase machine)
//	VerifyStaged   a StagedProcessOwnership signed by RS's credential
//	Stop           at teardown: StopSandbox, bounded wait, SIGKILL through
//	               RS's pidfd
//	Close          closes the lifetime pipe once RS is gone
//
// What the phase machine does with RS's messages, and which participant
// records what, is the coordinator's (pkg/hc) and the role packages'; this
// package owns only the process and its channel. Timeouts are injected
// through Config; the package signals nothing but the exact child it
// acquired.
package supervisor
