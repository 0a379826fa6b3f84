// Package sessionterm is the Session Terminal role of a Host Coordinator:
// the host PTY of one interactive Client Session, the `runsc exec` client
// whose controlling terminal it is, the guest process group that client
// leads in the sandbox, and the Domain Store record that names them.
//
// The record (Recorder, StoreRecorder, Recover) follows the
// session_terminal participant rules:
//
//	Intent ──exec client + guest group identified──▶ Running
//	   │                                                │
//	   └──failure before Running──▶ ReleaseIntent ◀──close, connection/PTY/exec loss
//	                                     │
//	                                     └──group, exec client and PTY absent──▶ Clean
//
// Recover reconciles the records a dead generation left: each exec client
// is proven absent (the guest group went with the sandbox, which the caller
// proved gone), then the record becomes Clean; a record whose exec client
// is not proven absent stays as it is and is reported.
package sessionterm
