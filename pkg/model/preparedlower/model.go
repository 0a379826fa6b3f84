// Package preparedlower is the Go transcription of tla/PreparedLower.tla:
// prepared-artifact preparation and publication, Storage Catalog generation
// leases, the Runtime Supervisor ownership slot, State Anchor mounts, the
// lease-acquisition and unmount/lease-release orderings, the split Host
// Coordinator lease-loss refinement, recovery, reclamation and stage
// recovery (specification §3.5, OR-7).
//
// Every TLA+ action is a method of Model with the same name and conjuncts,
// in module order; tla/MAPPING.md lists the correspondence.
package preparedlower

import (
	"fmt"
	"strings"
)

// Maximum fixture sizes supported by the fixed-size State.
const (
	MaxArtifacts   = 3
	MaxGenerations = 4
)

// ArtifactStates.
const (
	ArtAbsent uint8 = iota
	ArtPreparing
	ArtPublished
	ArtReclaiming
)

// PreparerStates.
const (
	PrepNone uint8 = iota
	PrepRunning
	PrepStaging
	PrepCrashed
)

// GenPhases.
const (
	Starting uint8 = iota
	Ready
	Stopping
	Failed
	Recovering
	Done
)

// HcStates.
const (
	HcAlive uint8 = iota
	HcDead
)

// RsStates.
const (
	RsAbsent uint8 = iota
	RsAlive
	RsDead
)

// SlotStates.
const (
	Unassigned uint8 = iota
	Staged
	Committed
)

// LowerStates and AnchorStates share None/Intent/ReleaseIntent/Clean; the
// fourth value is LeaseHeld for prepared_lower and Prepared for
// state_anchor.
const (
	PNone uint8 = iota
	PIntent
	PActive // LeaseHeld (lower) or Prepared (anchor)
	PReleaseIntent
	PClean
)

// MountStates.
const (
	MountAbsent uint8 = iota
	Mounted
)

var (
	artifactNames = []string{"Absent", "Preparing", "Published", "Reclaiming"}
	preparerNames = []string{"None", "Running", "Staging", "Crashed"}
	phaseNames    = []string{"Starting", "Ready", "Stopping", "Failed", "Recovering", "Done"}
	hcNames       = []string{"Alive", "Dead"}
	rsNames       = []string{"Absent", "Alive", "Dead"}
	slotNames     = []string{"Unassigned", "Staged", "Committed"}
	lowerNames    = []string{"None", "Intent", "LeaseHeld", "ReleaseIntent", "Clean"}
	anchorNames   = []string{"None", "Intent", "Prepared", "ReleaseIntent", "Clean"}
	mountNames    = []string{"Absent", "Mounted"}
)

// PhaseName is the TLA+ value of GenPhases p.
func PhaseName(p uint8) string { return phaseNames[p] }

// Tree bits in State.Trees.
func StageTree(a int) uint8 { return 1 << uint(2*a) }
func PubTree(a int) uint8   { return 1 << uint(2*a+1) }

// Foreign is the bit of the foreign tree.
const Foreign uint8 = 1 << 7

// State holds the variables of PreparedLower.tla.
type State struct {
	Artifact [MaxArtifacts]uint8
	Preparer [MaxArtifacts]uint8
	Lease    [MaxArtifacts]uint8 // set of generations
	Trees    uint8
	Phase    [MaxGenerations]uint8
	Hc       [MaxGenerations]uint8
	Rs       [MaxGenerations]uint8
	RsSlot   [MaxGenerations]uint8
	Lower    [MaxGenerations]uint8
	Anchor   [MaxGenerations]uint8
	Mount    [MaxGenerations]uint8
	Faults   uint8
	Reclaims uint8
}

// Config holds the CONSTANTS of PreparedLower.tla.
type Config struct {
	Name        string
	Artifacts   []string
	Generations []string
	GenArtifact []int
	MaxFaults   int
	MaxReclaims int
}

// Fixture is tla/PreparedLower.cfg: two generations (of different Domains)
// share artifact A1, with two faults and one reclaim. A third generation
// exceeds 16.5 million states before depth 19 (see tla/README.md).
func Fixture() *Config {
	return &Config{
		Name:        "PreparedLower.cfg",
		Artifacts:   []string{"A1"},
		Generations: []string{"G1", "G2"},
		GenArtifact: []int{0, 0},
		MaxFaults:   2,
		MaxReclaims: 1,
	}
}

// Reduced is the configuration run by `make test` for mutation tests: one
// artifact shared by two generations, one fault and one reclaim.
func Reduced() *Config {
	return &Config{
		Name:        "reduced",
		Artifacts:   []string{"A1"},
		Generations: []string{"G1", "G2"},
		GenArtifact: []int{0, 0},
		MaxFaults:   1,
		MaxReclaims: 1,
	}
}

// Validate checks the ASSUME of the module and the fixed-size limits.
func (c *Config) Validate() error {
	if len(c.Artifacts) == 0 || len(c.Generations) == 0 {
		return fmt.Errorf("preparedlower: Artifacts and Generations must be non-empty")
	}
	if len(c.Artifacts) > MaxArtifacts || len(c.Generations) > MaxGenerations {
		return fmt.Errorf("preparedlower: fixture larger than the fixed-size state")
	}
	if len(c.GenArtifact) != len(c.Generations) {
		return fmt.Errorf("preparedlower: GenArtifact must map every generation")
	}
	for _, a := range c.GenArtifact {
		if a < 0 || a >= len(c.Artifacts) {
			return fmt.Errorf("preparedlower: GenArtifact out of range")
		}
	}
	if c.MaxFaults < 0 || c.MaxFaults > 250 || c.MaxReclaims < 0 || c.MaxReclaims > 250 {
		return fmt.Errorf("preparedlower: budgets out of range")
	}
	return nil
}

func (c *Config) stateSize() int { return 3*len(c.Artifacts) + 1 + 7*len(c.Generations) + 2 }

// Model is a PreparedLower.tla instance. Mutations inject named defects.
type Model struct {
	C         *Config
	Mutations map[Mutation]bool
}

// New builds a model for c; it panics if c violates the ASSUME.
func New(c *Config) *Model {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return &Model{C: c}
}

func (m *Model) mut(x Mutation) bool { return m.Mutations[x] }

// Encode writes the canonical encoding of st.
func (m *Model) Encode(dst []byte, st State) {
	i := 0
	put := func(v uint8) { dst[i] = v; i++ }
	for a := range m.C.Artifacts {
		put(st.Artifact[a])
		put(st.Preparer[a])
		put(st.Lease[a])
	}
	put(st.Trees)
	for g := range m.C.Generations {
		put(st.Phase[g])
		put(st.Hc[g])
		put(st.Rs[g])
		put(st.RsSlot[g])
		put(st.Lower[g])
		put(st.Anchor[g])
		put(st.Mount[g])
	}
	put(st.Faults)
	put(st.Reclaims)
}

// Decode is the inverse of Encode.
func (m *Model) Decode(src []byte) State {
	var st State
	i := 0
	get := func() uint8 { v := src[i]; i++; return v }
	for a := range m.C.Artifacts {
		st.Artifact[a] = get()
		st.Preparer[a] = get()
		st.Lease[a] = get()
	}
	st.Trees = get()
	for g := range m.C.Generations {
		st.Phase[g] = get()
		st.Hc[g] = get()
		st.Rs[g] = get()
		st.RsSlot[g] = get()
		st.Lower[g] = get()
		st.Anchor[g] = get()
		st.Mount[g] = get()
	}
	st.Faults = get()
	st.Reclaims = get()
	return st
}

// Format renders a state in TLA+ notation.
func (m *Model) Format(st State) string {
	c := m.C
	var b strings.Builder
	q := func(s string) string { return `"` + s + `"` }
	fa := func(name string, f func(a int) string) {
		var p []string
		for a := range c.Artifacts {
			p = append(p, q(c.Artifacts[a])+" :> "+f(a))
		}
		fmt.Fprintf(&b, "/\\ %s = %s\n", name, strings.Join(p, " @@ "))
	}
	fg := func(name string, names []string, v *[MaxGenerations]uint8) {
		var p []string
		for g := range c.Generations {
			p = append(p, q(c.Generations[g])+" :> "+q(names[v[g]]))
		}
		fmt.Fprintf(&b, "/\\ %s = %s\n", name, strings.Join(p, " @@ "))
	}
	fa("artifact", func(a int) string { return q(artifactNames[st.Artifact[a]]) })
	fa("preparer", func(a int) string { return q(preparerNames[st.Preparer[a]]) })
	var tr []string
	for a := range c.Artifacts {
		if st.Trees&StageTree(a) != 0 {
			tr = append(tr, `<<"stage", `+q(c.Artifacts[a])+">>")
		}
		if st.Trees&PubTree(a) != 0 {
			tr = append(tr, `<<"published", `+q(c.Artifacts[a])+">>")
		}
	}
	if st.Trees&Foreign != 0 {
		tr = append(tr, "Foreign")
	}
	fmt.Fprintf(&b, "/\\ trees = {%s}\n", strings.Join(tr, ", "))
	fa("lease", func(a int) string {
		var gs []string
		for g := range c.Generations {
			if st.Lease[a]&(1<<uint(g)) != 0 {
				gs = append(gs, q(c.Generations[g]))
			}
		}
		return "{" + strings.Join(gs, ", ") + "}"
	})
	fg("phase", phaseNames, &st.Phase)
	fg("hc", hcNames, &st.Hc)
	fg("rs", rsNames, &st.Rs)
	fg("rsSlot", slotNames, &st.RsSlot)
	fg("lower", lowerNames, &st.Lower)
	fg("anchor", anchorNames, &st.Anchor)
	fg("mount", mountNames, &st.Mount)
	fmt.Fprintf(&b, "/\\ faults = %d\n/\\ reclaims = %d\n", st.Faults, st.Reclaims)
	return b.String()
}

// Init of PreparedLower.tla.
func (m *Model) Init() State {
	var st State
	for a := range m.C.Artifacts {
		st.Artifact[a] = ArtAbsent
		st.Preparer[a] = PrepNone
		st.Lease[a] = 0
	}
	st.Trees = Foreign
	for g := range m.C.Generations {
		st.Phase[g] = Starting
		st.Hc[g] = HcAlive
		st.Rs[g] = RsAbsent
		st.RsSlot[g] = Unassigned
		st.Lower[g] = PNone
		st.Anchor[g] = PNone
		st.Mount[g] = MountAbsent
	}
	st.Faults = uint8(m.C.MaxFaults)
	st.Reclaims = uint8(m.C.MaxReclaims)
	return st
}
