// Package preparedlower is the Host Coordinator's driver of the prepared
// lower and State Anchor roles (spec §3.5, FR-17, tla/PreparedLower.tla):
// the exact Storage Catalog lease on the prepared artifact a generation's
// sandbox mounts read-only, and the State Anchor mounts the Runtime
// Supervisor creates in its mount namespace. It owns the cross-record
// rules of prepared_lower and state_anchor, its part of the HC↔RS
// protocol (ArtifactReady → LeaseRecorded, AnchorsMounted, the unmounts
// SupervisorStopped reports), its failpoints and its model-trace steps.
//
// Acquisition, steps 1 and 2 taken ahead for the Storage Catalog's
// verdict (LeaseAhead, beside RS's start) or on RS's ArtifactReady, the
// rest on ArtifactReady for the artifact and manifest they name:
//
//  1. prepared_lower = Intent{artifact, lease_state=Intent}     (Domain Store)
//  2. the exact (artifact, Domain, generation) lease            (Storage Catalog, under its lock)
//  3. prepared_lower = LeaseHeld{lease_state=Held}, and in the same
//     transaction
//  4. RS's sandbox slot Committed and state_anchor = Intent{artifact};
//     LeaseRecorded → RS mounts; AnchorsMounted →
//     state_anchor = Prepared{artifact, mounts} (the store refuses it unless
//     RS's slot is Committed)
//
// Release (teardown, and bootstrap recovery of a dead generation):
//
//  1. state_anchor = ReleaseIntent, keeping the mount and artifact identity (before RS is stopped)
//  2. RS verifies each recorded mount and unmounts it (SupervisorStopped names them)
//  3. state_anchor = Clean and prepared_lower = ReleaseIntent, in one transaction, only once
//     every mount is proven absent: RS reported it unmounted, or RS's mount namespace has
//     no process and no nsfs bind left (pidfs.NamespaceHolders) — never "RS died"
//  4. the catalog removes exactly that lease under storage-catalog.lock, after rechecking
//     the Domain's ReleaseIntent and the mount absence
//  5. prepared_lower = Clean
//
// The loss-of-coordinator split: an RS whose coordinator is gone unmounts
// and exits without opening either store (pkg/rs); only a lock-holding HC
// (this one, or the next one's bootstrap recovery) releases the lease. Any
// mismatch or missing evidence retains the records and the lease.
package preparedlower
