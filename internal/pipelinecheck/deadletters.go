package pipelinecheck

import (
	"os"
	"path/filepath"
	"strings"
)

// CommittedLines reads the lines of a file sink's committed part files that match pattern (a
// filepath.Glob pattern ending in ".part-*"): a part still ".tmp" is not committed. Each line
// is returned with prefix before it; empty lines are left out.
func CommittedLines(pattern, prefix string) ([]string, error) {
	parts, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, f := range parts {
		if strings.HasSuffix(f, ".tmp") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if l != "" {
				lines = append(lines, prefix+l)
			}
		}
	}
	return lines, nil
}
