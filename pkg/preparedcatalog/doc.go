// Package preparedcatalog keeps the Storage Catalog (package catalog) and
// the Storage Root's prepared trees (package prepared) in step (spec §3.5,
// OR-7): gc's reclamation (GC: a tree's record becomes Reclaiming before
// the tree moves to the trash, and goes once it has), settling the intent
// of a preparer proven gone (SettleIntent) or abandoning one's own failed
// preparation (Abandon), the probe catalog.RecoverReclaim consults
// (ProbeTree), and whether a start may reuse a tree as it is (Published,
// Reusable).
//
// Package prepared holds the file-system mechanisms these call (locks,
// renames into the trash, quarantine) and links no catalog, so that the
// Runtime Supervisor, which validates and holds the tree it mounts, links
// no database library: the Host Coordinator judges reuse from the catalog
// and tells RS in StartSandbox, and its lease transaction checks the
// artifact is Published again before anything is mounted.
package preparedcatalog
