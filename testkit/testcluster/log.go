package testcluster

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// close stops every node and closes the cluster's log, the one file every node logs to: a
// failed test prints its last lines, a passed one removes it from $JMC_TEST_LOG_DIR.
func (c *Cluster) close() {
	for _, tm := range c.TMs {
		if tm.A != nil {
			tm.A.Kill()
		}
	}
	for _, j := range c.JMs {
		if j.A != nil {
			_ = j.A.Shutdown()
		}
	}
	c.mu.Lock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.mu.Unlock()
	c.logFile.Close()
	keep := os.Getenv("JMC_TEST_LOG_DIR")
	kept := keep != "" && filepath.Dir(c.logFile.Name()) == filepath.Clean(keep)
	switch {
	case c.T.Failed():
		c.dumpLog(300)
		if kept {
			c.T.Logf("the whole cluster log: %s", c.logFile.Name())
		}
	case kept:
		_ = os.Remove(c.logFile.Name())
	}
}

// LogPath is the file the cluster logs to: Dir's cluster.log, or a file in $JMC_TEST_LOG_DIR
// when that is set (createLog).
func (c *Cluster) LogPath() string { return c.logFile.Name() }

// createLog creates the cluster log. With $JMC_TEST_LOG_DIR set it is written there from the
// start (TestName-*.log) and removed when the test passes, so a failed test keeps its whole log
// even when the test binary dies (a -timeout panic runs no cleanup); otherwise it is dir's
// cluster.log.
func createLog(t testing.TB, dir string) (*os.File, error) {
	keep := os.Getenv("JMC_TEST_LOG_DIR")
	if keep == "" {
		return os.Create(filepath.Join(dir, "cluster.log"))
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return nil, err
	}
	name := strings.NewReplacer("/", "_", " ", "_", "*", "_").Replace(t.Name())
	return os.CreateTemp(keep, name+"-"+time.Now().Format("150405")+"-*.log")
}

// dumpLog prints the last n lines of the cluster log into the test output.
func (c *Cluster) dumpLog(n int) {
	f, err := os.Open(c.logFile.Name())
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	c.T.Logf("last %d lines of the cluster log:\n%s", len(lines), strings.Join(lines, "\n"))
}
