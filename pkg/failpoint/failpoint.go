package failpoint

// Env is the variable that arms a stage (or a comma-separated list of
// stages) in failpoint builds.
const Env = "LAZARET_FAILPOINT"

// AcquireSteps are the broker's CausalChildAcquisitionV1 stages, hit in the
// broker's process as "<process>:acquire:<slot>:<step>".
var AcquireSteps = []string{
	"barrier",    // step 2: barrier created, before spawn
	"spawned",    // step 3: wrapper spawned
	"identified", // steps 4–5: pidfd checked, identity formed (and setup done)
	"staged",     // step 6: Staged recorded/acknowledged
	"released",   // step 7: barrier released
}

// WrapperSteps are hit inside the wrapper as "wrapper:<slot>:<step>".
var WrapperSteps = []string{
	"blocked",     // waiting at the barrier
	"armed",       // step 8: parent-death armed, before the parent re-check
	"before-exec", // step 8: re-checked, before exec (or, in place, before the target's work)
}
