package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// failpointsFileEnv names a file whose failpoint terms are added to JMNODE_FAILPOINTS' while
// the process runs: the fault suite writes it to give a running JobMaster a slow disk and
// empties it to heal. The file is read every failpointsFilePoll; a file that does not parse is
// logged and ignored (the setting before it stays).
const (
	failpointsFileEnv  = "JMNODE_FAILPOINTS_FILE"
	failpointsFilePoll = 100 * time.Millisecond
)

// setFailpoints sets this process's failpoints from JMNODE_FAILPOINTS at start-up, and from
// then on follows JMNODE_FAILPOINTS_FILE when it is set. An unknown name or a retired
// JMNODE_UNSAFE_* variable stops the process.
func setFailpoints(log hclog.Logger) error {
	spec, err := failpoint.FromEnv(os.Environ())
	if err != nil {
		return err
	}
	if spec != "" {
		log.Warn("failpoints set: this process is broken on purpose; never in production", "failpoints", spec)
	}
	if path := os.Getenv(failpointsFileEnv); path != "" {
		log.Warn("failpoints follow a file: this process may be broken on purpose at any time; never in production", "file", path)
		go followFailpointsFile(context.Background(), log, path, spec)
	}
	return nil
}

// followFailpointsFile makes base plus the file's terms the setting whenever the file changes,
// until ctx ends.
func followFailpointsFile(ctx context.Context, log hclog.Logger, path, base string) {
	last := ""
	tick := time.NewTicker(failpointsFilePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			continue
		}
		extra := strings.TrimSpace(string(b))
		if extra == last {
			continue
		}
		last = extra
		spec := base
		if extra != "" {
			spec = strings.Trim(base+","+extra, ",")
		}
		if err := failpoint.Configure(spec); err != nil {
			log.Error("failpoints file does not parse; the setting is unchanged", "file", path, "error", err)
			continue
		}
		log.Warn("failpoints changed by file", "file", path, "failpoints", failpoint.Current())
	}
}

func runFailpoints(args []string) error {
	fs := flag.NewFlagSet("failpoints", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: jmnode failpoints\n\nLists the failpoints %s can set in a jobmaster or taskmanager process (the\n"+
			"fault suite's deliberately broken builds and the pauses between a commit and its RPC).\n", failpoint.EnvVar)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	printFailpoints(os.Stdout)
	return nil
}

func printFailpoints(w io.Writer) {
	fmt.Fprintf(w, "%s=TERM,TERM,... sets failpoints at start-up; never in production.\n", failpoint.EnvVar)
	fmt.Fprintln(w, "A switch is written NAME; a hook pause(NAME) (until released) or pause(NAME)=DUR (at most DUR).")
	fmt.Fprintln(w, "A value is written NAME=DUR, a Go duration, negative allowed (clock-offset=-30s).")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tEFFECT")
	for _, p := range failpoint.List() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Kind, p.Description)
	}
	_ = tw.Flush()
}
