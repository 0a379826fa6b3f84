package domain

import "path/filepath"

// IgnoredStateDir holds the Domain's Ignored Workspace State (SR-13): the
// sandbox's copies of Git-ignored workspace paths, persisting across
// generations (FR-4, DX-2).
func (p Paths) IgnoredStateDir() string { return filepath.Join(p.DomainRoot, "ignored-state") }

// RoutedWorkspace is where the Runtime Supervisor mounts the Git-routing
// daemon's view of the workspace (in its private mount namespace).
func (p Paths) RoutedWorkspace() string { return filepath.Join(p.RuntimeDir, "workspace") }

// GitignoreSnapshot is the generation's snapshot of the workspace's
// .gitignore files, which HC's start scan read and the Git-routing daemon
// applies (ignorerules.WriteSnapshot).
func (p Paths) GitignoreSnapshot() string {
	return filepath.Join(p.RuntimeDir, "gitignore-snapshot.json")
}
