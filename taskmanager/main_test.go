package taskmanager

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run when goroutines of this package outlive the tests (every goroutine
// has an owner that stops it).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitLeaks(d time.Duration) string {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "jmcluster/taskmanager.") && !strings.Contains(g, "TestMain") && !strings.Contains(g, "waitLeaks") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		<-tick.C
	}
}
