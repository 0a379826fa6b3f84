--------------------------- MODULE PreparedLower ---------------------------
EXTENDS Naturals, FiniteSets, TLC

(***************************************************************************)
(* Prepared-lower model for Lazaret (specification §3.5 and OR-7).        *)
(*                                                                         *)
(* It covers prepared-artifact preparation and publication under the       *)
(* Storage Catalog lock, cross-Domain generation leases, the Runtime       *)
(* Supervisor's process-ownership slot (Unassigned -> Staged -> Committed, *)
(* CausalChildAcquisitionV1), State Anchor mounts over the prepared lower, *)
(* the lease-acquisition and unmount/lease-release orderings, the split    *)
(* Host Coordinator lease-loss refinement (the surviving supervisor        *)
(* unmounts but never releases the catalog lease), bootstrap recovery,     *)
(* policy-controlled reclamation (no reclaim while any lease remains;      *)
(* in-progress prepare trees and foreign trees are never deleted) and      *)
(* fail-closed stage recovery backed by durable prepare intent.            *)
(*                                                                         *)
(* Each generation is one Domain generation (distinct generations may      *)
(* belong to distinct Domains and share an artifact). Pathnames, redb      *)
(* encoding, pidfs identities, overlayfs and OCI layer application are     *)
(* refinement boundaries: a tree is an abstract Storage Root entry, a      *)
(* mount an exact mount identity, a slot the durable ownership phase.      *)
(***************************************************************************)

CONSTANTS
    Artifacts,      \* prepared-artifact IDs
    Generations,    \* (Domain ID, generation) pairs
    GenArtifact,    \* the prepared artifact each generation's State Anchor uses
    Foreign,        \* a tree under the Storage Root that Lazaret does not own
    MaxFaults,      \* budget of crashes and hard losses (keeps liveness finite)
    MaxReclaims     \* budget of policy-initiated reclaims

ASSUME
    /\ IsFiniteSet(Artifacts) /\ Artifacts # {}
    /\ IsFiniteSet(Generations) /\ Generations # {}
    /\ GenArtifact \in [Generations -> Artifacts]
    /\ MaxFaults \in Nat /\ MaxReclaims \in Nat

StageTree(a) == <<"stage", a>>
PubTree(a) == <<"published", a>>
Trees == {StageTree(a) : a \in Artifacts} \cup {PubTree(a) : a \in Artifacts} \cup {Foreign}

ArtifactStates == {"Absent", "Preparing", "Published", "Reclaiming"}
PreparerStates == {"None", "Running", "Staging", "Crashed"}
GenPhases == {"Starting", "Ready", "Stopping", "Failed", "Recovering", "Done"}
HcStates == {"Alive", "Dead"}
RsStates == {"Absent", "Alive", "Dead"}
SlotStates == {"Unassigned", "Staged", "Committed"}
LowerStates == {"None", "Intent", "LeaseHeld", "ReleaseIntent", "Clean"}
AnchorStates == {"None", "Intent", "Prepared", "ReleaseIntent", "Clean"}
MountStates == {"Absent", "Mounted"}

(***************************************************************************)
(* Finite fixture operators used by PreparedLower.cfg: two generations     *)
(* (of different Domains) share artifact A1.                               *)
(***************************************************************************)
ArtifactsFixture == {"A1"}
GenerationsFixture == {"G1", "G2"}
GenArtifactFixture == ("G1" :> "A1") @@ ("G2" :> "A1")

VARIABLES
    artifact,       \* Storage Catalog artifact row (durable prepare intent = Preparing)
    preparer,       \* the preparation process of each artifact
    trees,          \* trees physically present under the Storage Root
    lease,          \* Storage Catalog leases: artifact -> set of generations
    phase,          \* generation lifecycle
    hc,             \* the generation's (original or bootstrap) Host Coordinator
    rs,             \* the generation's Runtime Supervisor process
    rsSlot,         \* durable Runtime Supervisor ownership slot
    lower,          \* Domain Store prepared_lower participant
    anchor,         \* Domain Store state_anchor participant
    mount,          \* the exact State Anchor mount
    faults,         \* remaining fault budget
    reclaims        \* remaining reclaim budget

vars == << artifact, preparer, trees, lease, phase, hc, rs, rsSlot, lower,
           anchor, mount, faults, reclaims >>

A(g) == GenArtifact[g]
RuntimeAbsent(g) == rs[g] # "Alive"

Init ==
    /\ artifact = [a \in Artifacts |-> "Absent"]
    /\ preparer = [a \in Artifacts |-> "None"]
    /\ trees = {Foreign}
    /\ lease = [a \in Artifacts |-> {}]
    /\ phase = [g \in Generations |-> "Starting"]
    /\ hc = [g \in Generations |-> "Alive"]
    /\ rs = [g \in Generations |-> "Absent"]
    /\ rsSlot = [g \in Generations |-> "Unassigned"]
    /\ lower = [g \in Generations |-> "None"]
    /\ anchor = [g \in Generations |-> "None"]
    /\ mount = [g \in Generations |-> "Absent"]
    /\ faults = MaxFaults
    /\ reclaims = MaxReclaims

(***************************************************************************)
(* Preparation and publication (catalog operations hold                   *)
(* storage-catalog.lock for one transaction).                              *)
(***************************************************************************)

\* Durable prepare intent is committed before the preparer creates anything;
\* preparation is demand-driven by a generation that holds lease intent or is
\* starting and has not recorded it yet: the Runtime Supervisor prepares (or
\* reuses) the artifact before the coordinator records the intent with the
\* artifact's identity. Safety does not rest on this order: InsertLease
\* needs the artifact Published in the same catalog transaction.
BeginPrepare(a) ==
    /\ artifact[a] = "Absent"
    /\ \E g \in Generations :
          /\ A(g) = a
          /\ hc[g] = "Alive"
          /\ \/ lower[g] = "Intent"
             \/ lower[g] = "None" /\ phase[g] = "Starting"
    /\ artifact' = [artifact EXCEPT ![a] = "Preparing"]
    /\ preparer' = [preparer EXCEPT ![a] = "Running"]
    /\ UNCHANGED << trees, lease, phase, hc, rs, rsSlot, lower, anchor, mount,
                    faults, reclaims >>

\* The preparer creates its stage tree beneath the Storage Root handle.
CreateStageTree(a) ==
    /\ preparer[a] = "Running"
    /\ trees' = trees \cup {StageTree(a)}
    /\ preparer' = [preparer EXCEPT ![a] = "Staging"]
    /\ UNCHANGED << artifact, lease, phase, hc, rs, rsSlot, lower, anchor,
                    mount, faults, reclaims >>

\* Rename of the completed stage tree and catalog publication.
PublishArtifact(a) ==
    /\ artifact[a] = "Preparing"
    /\ preparer[a] = "Staging"
    /\ StageTree(a) \in trees
    /\ trees' = (trees \ {StageTree(a)}) \cup {PubTree(a)}
    /\ artifact' = [artifact EXCEPT ![a] = "Published"]
    /\ preparer' = [preparer EXCEPT ![a] = "None"]
    /\ UNCHANGED << lease, phase, hc, rs, rsSlot, lower, anchor, mount, faults,
                    reclaims >>

PreparerCrash(a) ==
    /\ preparer[a] \in {"Running", "Staging"}
    /\ faults > 0
    /\ faults' = faults - 1
    /\ preparer' = [preparer EXCEPT ![a] = "Crashed"]
    /\ UNCHANGED << artifact, trees, lease, phase, hc, rs, rsSlot, lower,
                    anchor, mount, reclaims >>

\* Fail-closed stage recovery: an exact-owned abandoned stage tree backed by
\* durable prepare intent is deleted; an in-progress preparer is never touched.
RecoverStage(a) ==
    /\ artifact[a] = "Preparing"
    /\ preparer[a] = "Crashed"
    /\ trees' = trees \ {StageTree(a)}
    /\ artifact' = [artifact EXCEPT ![a] = "Absent"]
    /\ preparer' = [preparer EXCEPT ![a] = IF @ = "Crashed" THEN "None" ELSE @]
    /\ UNCHANGED << lease, phase, hc, rs, rsSlot, lower, anchor, mount, faults,
                    reclaims >>

\* Policy-controlled GC: transition to Reclaiming only when no lease remains.
BeginReclaim(a) ==
    /\ artifact[a] = "Published"
    /\ lease[a] = {}
    /\ reclaims > 0
    /\ reclaims' = reclaims - 1
    /\ artifact' = [artifact EXCEPT ![a] = "Reclaiming"]
    /\ UNCHANGED << preparer, trees, lease, phase, hc, rs, rsSlot, lower,
                    anchor, mount, faults >>

\* Deletes exactly the published tree of a Reclaiming artifact.
ReclaimArtifact(a) ==
    /\ artifact[a] = "Reclaiming"
    /\ lease[a] = {}
    /\ trees' = trees \ {PubTree(a)}
    /\ artifact' = [artifact EXCEPT ![a] = "Absent"]
    /\ UNCHANGED << preparer, lease, phase, hc, rs, rsSlot, lower, anchor,
                    mount, faults, reclaims >>

\* An interrupted reclamation whose published tree never left is rolled
\* back (by the next gc, preparer or lease acquisition, under the lock).
RollbackReclaim(a) ==
    /\ artifact[a] = "Reclaiming"
    /\ lease[a] = {}
    /\ PubTree(a) \in trees
    /\ artifact' = [artifact EXCEPT ![a] = "Published"]
    /\ UNCHANGED << preparer, trees, lease, phase, hc, rs, rsSlot, lower, anchor,
                    mount, faults, reclaims >>

(***************************************************************************)
(* Lease acquisition, supervisor acquisition, mount and publication        *)
(***************************************************************************)

\* 1. Commit prepared_lower = Intent with the intended prepared-artifact ID.
AcquireLeaseIntent(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ lower[g] = "None"
    /\ lower' = [lower EXCEPT ![g] = "Intent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    anchor, mount, faults, reclaims >>

\* 2. Under storage-catalog.lock insert the exact (artifact, Domain, generation)
\* lease; the artifact must be Published (not Reclaiming) in the same transaction.
InsertLease(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ lower[g] = "Intent"
    /\ artifact[A(g)] = "Published"
    /\ g \notin lease[A(g)]
    /\ lease' = [lease EXCEPT ![A(g)] = @ \cup {g}]
    /\ UNCHANGED << artifact, preparer, trees, phase, hc, rs, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

\* 3. Commit prepared_lower = LeaseHeld.
CommitLeaseHeld(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ lower[g] = "Intent"
    /\ g \in lease[A(g)]
    /\ lower' = [lower EXCEPT ![g] = "LeaseHeld"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    anchor, mount, faults, reclaims >>

\* CausalChildAcquisitionV1: the spawned supervisor is durably Staged before
\* its barrier is released.
SpawnSupervisor(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ rs[g] = "Absent"
    /\ rsSlot[g] = "Unassigned"
    /\ rs' = [rs EXCEPT ![g] = "Alive"]
    /\ rsSlot' = [rsSlot EXCEPT ![g] = "Staged"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, lower, anchor,
                    mount, faults, reclaims >>

\* Promotion to Committed only after target-specific readiness.
CommitSupervisor(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ rs[g] = "Alive"
    /\ rsSlot[g] = "Staged"
    /\ rsSlot' = [rsSlot EXCEPT ![g] = "Committed"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, lower,
                    anchor, mount, faults, reclaims >>

\* 4a. Commit state_anchor = Intent.
AnchorIntent(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ lower[g] = "LeaseHeld"
    /\ anchor[g] = "None"
    /\ anchor' = [anchor EXCEPT ![g] = "Intent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    lower, mount, faults, reclaims >>

\* 4b. The committed supervisor creates the exact mount over the leased lower.
\* Staged ownership cannot satisfy dependent-resource creation.
MountAnchor(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ anchor[g] = "Intent"
    /\ lower[g] = "LeaseHeld"
    /\ g \in lease[A(g)]
    /\ PubTree(A(g)) \in trees
    /\ rs[g] = "Alive"
    /\ rsSlot[g] = "Committed"
    /\ mount[g] = "Absent"
    /\ mount' = [mount EXCEPT ![g] = "Mounted"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    lower, anchor, faults, reclaims >>

\* 4c. Commit state_anchor = Prepared with its mount identity.
CommitAnchorPrepared(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ anchor[g] = "Intent"
    /\ mount[g] = "Mounted"
    /\ anchor' = [anchor EXCEPT ![g] = "Prepared"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    lower, mount, faults, reclaims >>

\* Readiness: active participants and committed (never Staged) ownership.
PublishGeneration(g) ==
    /\ phase[g] = "Starting"
    /\ hc[g] = "Alive"
    /\ lower[g] = "LeaseHeld"
    /\ anchor[g] = "Prepared"
    /\ mount[g] = "Mounted"
    /\ rs[g] = "Alive"
    /\ rsSlot[g] = "Committed"
    /\ phase' = [phase EXCEPT ![g] = "Ready"]
    /\ UNCHANGED << artifact, preparer, trees, lease, hc, rs, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

(***************************************************************************)
(* Normal release: unmount, then lease release                             *)
(***************************************************************************)

\* Last session leaves or startup is abandoned (environment; not fair).
BeginRelease(g) ==
    /\ phase[g] \in {"Starting", "Ready"}
    /\ hc[g] = "Alive"
    /\ phase' = [phase EXCEPT ![g] = "Stopping"]
    /\ UNCHANGED << artifact, preparer, trees, lease, hc, rs, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

\* 1. Commit state_anchor = ReleaseIntent retaining the mount identity
\* (also the first recovery step when the exact mount may remain).
AnchorReleaseIntent(g) ==
    /\ phase[g] \in {"Stopping", "Recovering"}
    /\ hc[g] = "Alive"
    /\ anchor[g] \in {"Intent", "Prepared"}
    /\ anchor' = [anchor EXCEPT ![g] = "ReleaseIntent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    lower, mount, faults, reclaims >>

\* 2. The supervisor verifies the recorded mount identity and unmounts it.
UnmountAnchor(g) ==
    /\ phase[g] = "Stopping"
    /\ hc[g] = "Alive"
    /\ anchor[g] = "ReleaseIntent"
    /\ rs[g] = "Alive"
    /\ mount[g] = "Mounted"
    /\ mount' = [mount EXCEPT ![g] = "Absent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    lower, anchor, faults, reclaims >>

\* 3. After observing exact mount absence, atomically commit
\* state_anchor = Clean and prepared_lower = ReleaseIntent.
AnchorClean(g) ==
    /\ phase[g] \in {"Stopping", "Recovering"}
    /\ hc[g] = "Alive"
    /\ anchor[g] = "ReleaseIntent"
    /\ mount[g] = "Absent"
    /\ lower[g] = "LeaseHeld"
    /\ anchor' = [anchor EXCEPT ![g] = "Clean"]
    /\ lower' = [lower EXCEPT ![g] = "ReleaseIntent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    mount, faults, reclaims >>

\* A lease (or lease intent) with no anchor participant: release intent
\* directly; the anchor snapshot becomes the explicit empty Clean record.
ReleaseUnanchoredLower(g) ==
    /\ phase[g] \in {"Stopping", "Recovering"}
    /\ hc[g] = "Alive"
    /\ anchor[g] = "None"
    /\ lower[g] \in {"Intent", "LeaseHeld"}
    /\ mount[g] = "Absent"
    /\ anchor' = [anchor EXCEPT ![g] = "Clean"]
    /\ lower' = [lower EXCEPT ![g] = "ReleaseIntent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    mount, faults, reclaims >>

\* 4. Under storage-catalog.lock recheck release intent and mount absence,
\* then remove only the exact generation lease.
RemoveLease(g) ==
    /\ hc[g] = "Alive"
    /\ lower[g] = "ReleaseIntent"
    /\ mount[g] = "Absent"
    /\ g \in lease[A(g)]
    /\ lease' = [lease EXCEPT ![A(g)] = @ \ {g}]
    /\ UNCHANGED << artifact, preparer, trees, phase, hc, rs, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

\* 5. Commit prepared_lower = Clean (an already absent lease permits it).
LowerClean(g) ==
    /\ hc[g] = "Alive"
    /\ lower[g] = "ReleaseIntent"
    /\ g \notin lease[A(g)]
    /\ lower' = [lower EXCEPT ![g] = "Clean"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    anchor, mount, faults, reclaims >>

\* The Host Coordinator stops the supervisor through its exact retained
\* handle once the mount is gone (Staged ownership authorizes this cleanup).
StopSupervisor(g) ==
    /\ phase[g] = "Stopping"
    /\ hc[g] = "Alive"
    /\ rs[g] = "Alive"
    /\ mount[g] = "Absent"
    /\ rs' = [rs EXCEPT ![g] = "Dead"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

\* Exact absence proof of the supervisor clears its slot.
ClearSupervisorSlot(g) ==
    /\ phase[g] \in {"Stopping", "Recovering"}
    /\ hc[g] = "Alive"
    /\ rs[g] # "Alive"
    /\ rsSlot[g] # "Unassigned"
    /\ rsSlot' = [rsSlot EXCEPT ![g] = "Unassigned"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, lower,
                    anchor, mount, faults, reclaims >>

FinishGeneration(g) ==
    /\ phase[g] \in {"Stopping", "Recovering"}
    /\ hc[g] = "Alive"
    /\ lower[g] \in {"None", "Clean"}
    /\ anchor[g] \in {"None", "Clean"}
    /\ mount[g] = "Absent"
    /\ RuntimeAbsent(g)
    /\ rsSlot[g] = "Unassigned"
    /\ phase' = [phase EXCEPT ![g] = "Done"]
    /\ UNCHANGED << artifact, preparer, trees, lease, hc, rs, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

(***************************************************************************)
(* Host Coordinator loss split, supervisor loss, and recovery              *)
(***************************************************************************)

HardLoseHostCoordinator(g) ==
    /\ phase[g] \in {"Starting", "Ready", "Stopping"}
    /\ hc[g] = "Alive"
    /\ faults > 0
    /\ faults' = faults - 1
    /\ hc' = [hc EXCEPT ![g] = "Dead"]
    /\ phase' = [phase EXCEPT ![g] = "Failed"]
    /\ UNCHANGED << artifact, preparer, trees, lease, rs, rsSlot, lower,
                    anchor, mount, reclaims >>

\* The surviving supervisor verifies and unmounts its exact mount without
\* opening the Domain Store or Storage Catalog: anchor, lower and the catalog
\* lease are retained.
LeaseLossUnmount(g) ==
    /\ phase[g] = "Failed"
    /\ hc[g] = "Dead"
    /\ rs[g] = "Alive"
    /\ mount[g] = "Mounted"
    /\ mount' = [mount EXCEPT ![g] = "Absent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    lower, anchor, faults, reclaims >>

LeaseLossExit(g) ==
    /\ phase[g] = "Failed"
    /\ hc[g] = "Dead"
    /\ rs[g] = "Alive"
    /\ mount[g] = "Absent"
    /\ rs' = [rs EXCEPT ![g] = "Dead"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

\* Supervisor crash: its exact mount may remain for recovery.
HardLoseSupervisor(g) ==
    /\ phase[g] \in {"Starting", "Ready", "Stopping", "Failed"}
    /\ rs[g] = "Alive"
    /\ faults > 0
    /\ faults' = faults - 1
    /\ rs' = [rs EXCEPT ![g] = "Dead"]
    /\ phase' = [phase EXCEPT ![g] = "Failed"]
    /\ UNCHANGED << artifact, preparer, trees, lease, hc, rsSlot, lower, anchor,
                    mount, reclaims >>

\* A new lock-holding Host Coordinator after hard loss, once the supervisor
\* is absent.
BootstrapRecoveryCoordinator(g) ==
    /\ phase[g] = "Failed"
    /\ hc[g] = "Dead"
    /\ RuntimeAbsent(g)
    /\ hc' = [hc EXCEPT ![g] = "Alive"]
    /\ phase' = [phase EXCEPT ![g] = "Recovering"]
    /\ UNCHANGED << artifact, preparer, trees, lease, rs, rsSlot, lower, anchor,
                    mount, faults, reclaims >>

\* The surviving Host Coordinator recovers after supervisor loss.
BeginRecovery(g) ==
    /\ phase[g] = "Failed"
    /\ hc[g] = "Alive"
    /\ RuntimeAbsent(g)
    /\ phase' = [phase EXCEPT ![g] = "Recovering"]
    /\ UNCHANGED << artifact, preparer, trees, lease, hc, rs, rsSlot, lower,
                    anchor, mount, faults, reclaims >>

\* Bootstrap exact unmount of a mount that survived (anchor in ReleaseIntent).
RecoveryUnmountAnchor(g) ==
    /\ phase[g] = "Recovering"
    /\ hc[g] = "Alive"
    /\ anchor[g] = "ReleaseIntent"
    /\ mount[g] = "Mounted"
    /\ mount' = [mount EXCEPT ![g] = "Absent"]
    /\ UNCHANGED << artifact, preparer, trees, lease, phase, hc, rs, rsSlot,
                    lower, anchor, faults, reclaims >>

PreparationProgress(a) ==
    \/ BeginPrepare(a)
    \/ CreateStageTree(a)
    \/ PublishArtifact(a)
    \/ RecoverStage(a)
    \/ ReclaimArtifact(a)

GenerationProgress(g) ==
    \/ AcquireLeaseIntent(g)
    \/ InsertLease(g)
    \/ CommitLeaseHeld(g)
    \/ SpawnSupervisor(g)
    \/ CommitSupervisor(g)
    \/ AnchorIntent(g)
    \/ MountAnchor(g)
    \/ CommitAnchorPrepared(g)
    \/ PublishGeneration(g)
    \/ AnchorReleaseIntent(g)
    \/ UnmountAnchor(g)
    \/ AnchorClean(g)
    \/ ReleaseUnanchoredLower(g)
    \/ RemoveLease(g)
    \/ LowerClean(g)
    \/ StopSupervisor(g)
    \/ ClearSupervisorSlot(g)
    \/ FinishGeneration(g)
    \/ LeaseLossUnmount(g)
    \/ LeaseLossExit(g)
    \/ BootstrapRecoveryCoordinator(g)
    \/ BeginRecovery(g)
    \/ RecoveryUnmountAnchor(g)

Environment ==
    \/ \E a \in Artifacts : PreparerCrash(a) \/ BeginReclaim(a) \/ RollbackReclaim(a)
    \/ \E g \in Generations :
          BeginRelease(g) \/ HardLoseHostCoordinator(g) \/ HardLoseSupervisor(g)

Next ==
    \/ \E a \in Artifacts : PreparationProgress(a)
    \/ \E g \in Generations : GenerationProgress(g)
    \/ Environment

\* Crashes, losses, release requests and reclaim policy are not fair.
Spec ==
    /\ Init
    /\ [][Next]_vars
    /\ \A a \in Artifacts : WF_vars(PreparationProgress(a))
    /\ \A g \in Generations : WF_vars(GenerationProgress(g))

(***************************************************************************)
(* Safety                                                                  *)
(***************************************************************************)

TypeOK ==
    /\ artifact \in [Artifacts -> ArtifactStates]
    /\ preparer \in [Artifacts -> PreparerStates]
    /\ trees \subseteq Trees
    /\ lease \in [Artifacts -> SUBSET Generations]
    /\ phase \in [Generations -> GenPhases]
    /\ hc \in [Generations -> HcStates]
    /\ rs \in [Generations -> RsStates]
    /\ rsSlot \in [Generations -> SlotStates]
    /\ lower \in [Generations -> LowerStates]
    /\ anchor \in [Generations -> AnchorStates]
    /\ mount \in [Generations -> MountStates]
    /\ faults \in 0..MaxFaults
    /\ reclaims \in 0..MaxReclaims

\* OR-7: no reclaim while any lease for the artifact remains.
NoReclaimWhileLeased ==
    \A a \in Artifacts : artifact[a] = "Reclaiming" => lease[a] = {}

LeasedArtifactPublished ==
    \A a \in Artifacts :
        lease[a] # {} => artifact[a] = "Published" /\ PubTree(a) \in trees

PublishedArtifactTreePresent ==
    \A a \in Artifacts :
        (artifact[a] \in {"Published", "Reclaiming"}) <=> (PubTree(a) \in trees)

\* OR-7: foreign trees are never deleted.
ForeignTreesPreserved == Foreign \in trees

\* OR-7: an in-progress prepare tree is never deleted.
InProgressPrepareTreesKept ==
    \A a \in Artifacts :
        /\ preparer[a] = "Staging" => StageTree(a) \in trees
        /\ preparer[a] # "None" => artifact[a] = "Preparing"

\* Every exact-owned stage tree is backed by durable prepare intent.
StageTreesBackedByIntent ==
    \A a \in Artifacts : StageTree(a) \in trees => artifact[a] = "Preparing"

\* A mounted State Anchor never becomes unleased.
MountedAnchorLeased ==
    \A g \in Generations :
        mount[g] = "Mounted" =>
            /\ g \in lease[A(g)]
            /\ artifact[A(g)] = "Published"
            /\ PubTree(A(g)) \in trees

\* A Domain LeaseHeld record always has its exact catalog lease.
LeaseHeldRecordMatchesCatalog ==
    \A g \in Generations : lower[g] = "LeaseHeld" => g \in lease[A(g)]

\* A catalog lease always has Domain-side evidence that may release it.
CatalogLeaseHasDomainRecord ==
    \A a \in Artifacts : \A g \in lease[a] :
        A(g) = a /\ lower[g] \in {"Intent", "LeaseHeld", "ReleaseIntent"}

\* The anchor participant exists only under a held lower lease.
AnchorRequiresLease ==
    \A g \in Generations :
        anchor[g] \in {"Intent", "Prepared", "ReleaseIntent"} => lower[g] = "LeaseHeld"

\* Release ordering: Clean anchor and lower release only after unmount.
ReleaseAfterUnmount ==
    \A g \in Generations :
        /\ anchor[g] = "Clean" => mount[g] = "Absent"
        /\ lower[g] \in {"ReleaseIntent", "Clean"} =>
               /\ mount[g] = "Absent"
               /\ anchor[g] \in {"None", "Clean"}
        /\ mount[g] = "Mounted" => anchor[g] \in {"Intent", "Prepared", "ReleaseIntent"}

\* Staged ownership never satisfies dependent-resource creation: a mount
\* created during startup has a committed supervisor.
StagedOwnershipNoDependents ==
    \A g \in Generations :
        (mount[g] = "Mounted" /\ phase[g] \in {"Starting", "Ready"}) => rsSlot[g] = "Committed"

\* Readiness: a published generation has active participants and committed
\* ownership.
PublishedGenerationReady ==
    \A g \in Generations :
        phase[g] = "Ready" =>
            /\ hc[g] = "Alive"
            /\ lower[g] = "LeaseHeld"
            /\ anchor[g] = "Prepared"
            /\ mount[g] = "Mounted"
            /\ rs[g] = "Alive"
            /\ rsSlot[g] = "Committed"

\* The supervisor is owned: a live supervisor has a staged or committed slot.
SupervisorOwned ==
    \A g \in Generations : rs[g] = "Alive" => rsSlot[g] \in {"Staged", "Committed"}

\* Recovery begins only after the supervisor is absent.
RecoveryAfterRuntimeAbsent ==
    \A g \in Generations : phase[g] = "Recovering" => RuntimeAbsent(g)

DoneIsClean ==
    \A g \in Generations :
        phase[g] = "Done" =>
            /\ lower[g] \in {"None", "Clean"}
            /\ anchor[g] \in {"None", "Clean"}
            /\ mount[g] = "Absent"
            /\ g \notin lease[A(g)]
            /\ RuntimeAbsent(g)
            /\ rsSlot[g] = "Unassigned"

Safety ==
    /\ TypeOK
    /\ NoReclaimWhileLeased
    /\ LeasedArtifactPublished
    /\ PublishedArtifactTreePresent
    /\ ForeignTreesPreserved
    /\ InProgressPrepareTreesKept
    /\ StageTreesBackedByIntent
    /\ MountedAnchorLeased
    /\ LeaseHeldRecordMatchesCatalog
    /\ CatalogLeaseHasDomainRecord
    /\ AnchorRequiresLease
    /\ ReleaseAfterUnmount
    /\ StagedOwnershipNoDependents
    /\ PublishedGenerationReady
    /\ SupervisorOwned
    /\ RecoveryAfterRuntimeAbsent
    /\ DoneIsClean

(***************************************************************************)
(* Liveness                                                                *)
(***************************************************************************)

\* Every release, including the HC-loss split, ends in a clean generation.
ReleaseEventuallyCompletes ==
    \A g \in Generations : phase[g] \in {"Stopping", "Failed"} ~> phase[g] = "Done"

\* A starting generation is eventually published or released.
StartEventuallyResolves ==
    \A g \in Generations : phase[g] = "Starting" ~> phase[g] # "Starting"

\* Lease intent is eventually held or released.
LeaseIntentEventuallyResolves ==
    \A g \in Generations : lower[g] = "Intent" ~> lower[g] \in {"LeaseHeld", "Clean"}

\* Preparation ends in publication or fail-closed stage recovery.
PreparationEventuallyResolves ==
    \A a \in Artifacts : artifact[a] = "Preparing" ~> artifact[a] \in {"Published", "Absent"}

\* (or is rolled back, its tree never having left: RollbackReclaim).
ReclaimEventuallyCompletes ==
    \A a \in Artifacts : artifact[a] = "Reclaiming" ~> artifact[a] \in {"Absent", "Published"}

=============================================================================
