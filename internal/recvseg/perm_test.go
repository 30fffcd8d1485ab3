package recvseg

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
)

// TestLedgerIsPrivate: ledger directories are 0700 and their files 0600.
func TestLedgerIsPrivate(t *testing.T) {
	session := t.TempDir()
	seg := newSegment(t)
	dir := Dir(session, ids.New())
	if err := Add(dir, seg); err != nil {
		t.Fatal(err)
	}
	defer Sweep(dir)
	for path, want := range map[string]os.FileMode{Root(session): 0o700, dir: 0o700, filepath.Join(dir, File): 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, want mode %o", path, err, want)
		}
	}
}
