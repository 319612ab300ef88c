//go:build !linux

package checkpoint

// syncFiles makes the named files (relative to the root) durable: an fsync of each.
func (s *Store) syncFiles(names []string) error { return s.fsyncEach(names) }
