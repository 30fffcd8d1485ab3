package objstore

import (
	"os"
	"testing"

	"github.com/goray-dev/goray/sdk/storage"
)

// TestArenaNameIsWhatReadIntoAccepts: storage plugins' ReadInto writes only
// into a memfd named storage.ArenaName; the store's arena must be one.
func TestArenaNameIsWhatReadIntoAccepts(t *testing.T) {
	if memfdName != storage.ArenaName {
		t.Fatalf("the arena memfd is named %q, but ReadInto accepts only %q", memfdName, storage.ArenaName)
	}
	s := newTestStore(t, 4096)
	if link, err := os.Readlink(s.ArenaPath()); err != nil || link != "/memfd:"+storage.ArenaName+" (deleted)" {
		t.Fatalf("ArenaPath %s reads as %q (%v)", s.ArenaPath(), link, err)
	}
}
