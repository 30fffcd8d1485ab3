package raylet

import (
	"context"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/spill"
)

// The spiller (package internal/spill) belongs to the object manager: it
// spills primary copies when the store fills up and restores them when
// they are read.

// SpillConfig configures spilling primary copies of objects to storage
// when the store fills up, and restoring them when they are read (see
// spill.Config for its fields).
type SpillConfig = spill.Config

// Spilling defaults (see SpillConfig).
const (
	// DefaultSpillThreshold is SpillConfig.Threshold's default.
	DefaultSpillThreshold = spill.DefaultThreshold
	// DefaultMinSpillFileSize is SpillConfig.MinFileSize's default.
	DefaultMinSpillFileSize = spill.DefaultMinFileSize
	// DefaultMaxObjectsPerFile is SpillConfig.MaxObjectsPerFile's default.
	DefaultMaxObjectsPerFile = spill.DefaultMaxObjectsPerFile
	// DefaultSpillWait is SpillConfig.Wait's default.
	DefaultSpillWait = spill.DefaultWait
)

// spillStore is the node's store as the spiller sees it.
type spillStore struct{ ObjectStore }

// Usage implements spill.Store.
func (s spillStore) Usage() (used, capacity int64) {
	u := s.ObjectStore.Usage()
	return u.Used, u.Capacity
}

// spillObjects is the object manager as the spiller sees it
// (spill.Objects).
type spillObjects struct{ om *objectManager }

// Primaries implements spill.Objects.
func (o spillObjects) Primaries(objs []ids.ObjectID) []bool { return o.om.primaries(objs) }

// Alive implements spill.Objects.
func (o spillObjects) Alive(objs []ids.ObjectID) []bool { return o.om.alive(objs) }

// EvictSecondaries implements spill.Objects.
func (o spillObjects) EvictSecondaries(need int64) int64 { return o.om.evictSecondaries(need) }

// Track implements spill.Objects.
func (o spillObjects) Track(oid ids.ObjectID, owner *gorayv1.Address) {
	o.om.track(oid, owner, false)
}

// CreateMakingRoom implements spill.Objects.
func (o spillObjects) CreateMakingRoom(ctx context.Context, oid ids.ObjectID, size int64, meta []byte, creator ids.ID) (int64, error) {
	return o.om.createMakingRoom(ctx, oid, size, meta, creator)
}
