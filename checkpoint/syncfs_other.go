//go:build !linux

package checkpoint

import (
	"os"
	"path/filepath"
)

// syncFiles makes the named files (relative to the root) durable: an fsync of each.
func (s *Store) syncFiles(names []string) error {
	for _, n := range names {
		f, err := s.root.OpenFile(filepath.FromSlash(n), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
