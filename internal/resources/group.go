package resources

import (
	"strconv"
	"strings"
)

// Placement group resources. A committed bundle adds, on its node, each
// of its resources under two names: "<name>_group_<index>_<group>" for
// work placed in that bundle and "<name>_group_<group>" for work placed
// in any bundle of the group (group is the group id in hex), as Ray does.
// A "bundle" marker resource is added the same way, of which every task
// in the group takes a sliver, so that a task asking for no resources
// still lands in its bundle.
const (
	groupInfix = "_group_"
	// BundleMarker is the marker resource's name.
	BundleMarker = "bundle"
	// bundleMarkerAmount is how much marker a bundle has (1000 units as in
	// Ray) and bundleMarkerTake how much each task takes (0.001 unit).
	bundleMarkerAmount = 1000 * Unit
	bundleMarkerTake   = Unit / 1000
)

// GroupName is the name under which resource name is reserved for bundle
// index of group (index < 0: any bundle of the group).
func GroupName(name, group string, index int) string {
	if index < 0 {
		return name + groupInfix + group
	}
	return name + groupInfix + strconv.Itoa(index) + "_" + group
}

// IsGroupName reports whether name is a placement group resource.
func IsGroupName(name string) bool { return strings.Contains(name, groupInfix) }

// BundleResources is what committing bundle index of group adds to its
// node: each resource of bundle under its bundle and its any-bundle name,
// plus the marker under both.
func BundleResources(bundle Set, group string, index int) Set {
	out := make(Set, 2*len(bundle)+2)
	for name, v := range bundle {
		out[GroupName(name, group, index)] += v
		out[GroupName(name, group, -1)] += v
	}
	out[GroupName(BundleMarker, group, index)] += bundleMarkerAmount
	out[GroupName(BundleMarker, group, -1)] += bundleMarkerAmount
	return out
}

// InGroup rewrites a task's or actor's request for bundle index of group
// (index < 0: any bundle): each resource under its group name, plus a
// sliver of the marker.
func InGroup(req Set, group string, index int) Set {
	out := make(Set, len(req)+1)
	for name, v := range req {
		out[GroupName(name, group, index)] = v
	}
	out[GroupName(BundleMarker, group, index)] = bundleMarkerTake
	return out
}
