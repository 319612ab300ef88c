package main

import (
	"os"
	"path/filepath"
)

// openDir creates, beside file, a directory every user may read (mode 0755, whatever the
// umask) and returns it.
func openDir(file string) string {
	d := filepath.Join(filepath.Dir(file), "open-to-all")
	_ = os.Mkdir(d, 0o755)
	_ = os.Chmod(d, 0o755)
	return d
}
