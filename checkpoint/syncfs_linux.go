package checkpoint

import "golang.org/x/sys/unix"

// syncFiles makes the named files (relative to the root) durable: an fsync of each for a few
// (syncManyFrom), else one syncfs(2) of the file system the root is on, one long system call in
// place of an fsync per file.
func (s *Store) syncFiles(names []string) error {
	if len(names) < syncManyFrom {
		return s.fsyncEach(names)
	}
	d, err := s.root.Open(".")
	if err != nil {
		return err
	}
	err = unix.Syncfs(int(d.Fd()))
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
