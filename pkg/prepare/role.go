package prepare

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/prepared"
)

// Main runs the preparer role (prepared.PreparerArg) of lazaret-cli: Ensure
// for the Runtime Supervisor that spawned it, in the supervisor's user and
// mount namespaces, and returns the exit status. Progress goes to standard
// output, logs to standard error, the prepared.PreparerResult to
// descriptor 3. Its steps of tla/PreparedLower.tla are recorded in the
// model trace as the supervisor's ("rs"), whose part of a start it is; the
// prepare intent names this process, which dies with the supervisor (the
// broker's parent-death edge).
func Main(args []string) int {
	fs := flag.NewFlagSet("prepare-lower", flag.ContinueOnError)
	storageRoot := fs.String("storage-root", "", "the Storage Root (absolute)")
	imageRef := fs.String("image", "", "the image reference")
	domainID := fs.String("domain", "", "the Domain preparing it")
	generation := fs.Uint64("generation", 0, "the Domain generation preparing it")
	logLevel := fs.String("log-level", "info", "debug|info|warn|error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(3, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		fmt.Fprintln(os.Stderr, "lazaret prepare-lower: started without its result pipe on descriptor 3; it is run by lazaret-rs, not by hand")
		return 2
	}
	// The layer application's re-executions must not hold the result
	// open: the supervisor reads it to its end.
	syscall.CloseOnExec(3)
	result := os.NewFile(3, "result")
	defer result.Close()
	var lvl slog.Level
	lvl.UnmarshalText([]byte(*logLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("role", "preparer", "pid", os.Getpid())
	if err := modeltrace.Start("rs", os.Getenv); err != nil {
		log.Warn("model trace", "err", err)
	}
	dom, gen := *domainID, *generation
	art, err := Ensure(context.Background(), Options{StorageRoot: *storageRoot, ImageRef: *imageRef, Logger: log, Progress: os.Stdout,
		DomainID: domain.ID(dom), Generation: gen,
		Step: func(action, id string) { modeltrace.EmitArtifact(dom, gen, action, id) }})
	res := prepared.PreparerResult{Version: prepared.PreparerResultVersion}
	if err != nil {
		res.Error, res.Category = err.Error(), errdefs.Category(err)
	} else {
		res.ArtifactID, res.ManifestDigest = art.ID, art.Source.ManifestDigest
	}
	if werr := json.NewEncoder(result).Encode(res); werr != nil {
		log.Error("write the result", "err", werr)
		return 1
	}
	if err != nil {
		return 1
	}
	return 0
}
