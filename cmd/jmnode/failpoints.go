package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/internal/failpoint"
)

// setFailpoints sets this process's failpoints from JMNODE_FAILPOINTS, once, at start-up. An
// unknown name or a retired JMNODE_UNSAFE_* variable stops the process.
func setFailpoints(log hclog.Logger) error {
	spec, err := failpoint.FromEnv(os.Environ())
	if err != nil {
		return err
	}
	if spec != "" {
		log.Warn("failpoints set: this process is broken on purpose; never in production", "failpoints", spec)
	}
	return nil
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
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tEFFECT")
	for _, p := range failpoint.List() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Kind, p.Description)
	}
	_ = tw.Flush()
}
