package pipelinecheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// PartDir is one directory a file sink commits parts in (a TaskManager's work directory),
// with the name its lines are prefixed with ("" for none).
type PartDir struct {
	Dir, Name string
}

// CommittedLines reads a file sink's committed output spread over several directories: the
// part files in each dir that match pattern (a filepath.Glob pattern relative to the dir,
// ending in ".part-*"; a part still ".tmp" is not committed). A part is written with the same
// bytes however often, and on however many TaskManagers, it is committed (a region restored
// elsewhere commits its checkpoint's parts again: operator/filecommit.go), so the committed
// output is the union of the parts by name, in name order, each read once. A part of one name
// whose bytes differ between two directories is an error naming both. Each line is returned
// as "<name>: <line>" (the first directory holding its part), or bare for a name ""; empty
// lines are left out.
func CommittedLines(dirs []PartDir, pattern string) ([]string, error) {
	type part struct {
		dir  PartDir
		path string
		body []byte
	}
	parts := map[string]part{}
	for _, d := range dirs {
		files, err := filepath.Glob(filepath.Join(d.Dir, pattern))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f, ".tmp") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			name := filepath.Base(f)
			if seen, ok := parts[name]; ok {
				if !bytes.Equal(seen.body, b) {
					return nil, fmt.Errorf("committed part %s differs between %s (%d bytes) and %s (%d bytes): a part must be committed with the same bytes wherever it is",
						name, seen.path, len(seen.body), f, len(b))
				}
				continue
			}
			parts[name] = part{d, f, b}
		}
	}
	names := make([]string, 0, len(parts))
	for n := range parts {
		names = append(names, n)
	}
	sort.Strings(names)
	var lines []string
	for _, n := range names {
		p := parts[n]
		prefix := ""
		if p.dir.Name != "" {
			prefix = p.dir.Name + ": "
		}
		for _, l := range strings.Split(strings.TrimRight(string(p.body), "\n"), "\n") {
			if l != "" {
				lines = append(lines, prefix+l)
			}
		}
	}
	return lines, nil
}
