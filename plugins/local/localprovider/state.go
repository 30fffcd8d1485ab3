package localprovider

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/statedir"
)

// The provider's state lives in its state_dir (a statedir.Dir):
//
//	state_dir/.lock                    flock'ed around every change
//	state_dir/<cluster>/instances.json one cluster's requests, instances and unpolled errors
//	state_dir/_<n>/                    an instance's temp dir (short: socket paths live under it;
//	                                   cluster names never start with "_")
//
// Every call reads the state files under the lock, changes them and
// writes them back atomically, so several provider processes on one
// state_dir (the head's autoscaler and `goray down`) and a provider
// restarted after a crash agree on what exists.

// instanceDirPrefix starts the name of every instance's temp dir in
// state_dir; no cluster name starts with it.
const instanceDirPrefix = "_"

// stateFile is the name of a cluster's state file.
const stateFile = "instances.json"

// stateVersion is the version of the state file format.
const stateVersion = 1

// requestTTL is how long a served request id is remembered once none of
// its instances is left: a retry of a launch comes within seconds, not
// days.
const requestTTL = 7 * 24 * time.Hour

// clusterState is one cluster's state file.
type clusterState struct {
	Version int    `json:"version"`
	Cluster string `json:"cluster"`
	// Next is the number of the cluster's last instance id.
	Next int `json:"next"`
	// Requests are the launch request ids served, by id.
	Requests map[string]requestRecord `json:"requests"`
	// Instances are the cluster's non-terminated instances.
	Instances []*instanceRecord `json:"instances"`
	// Errors are the launch and terminate errors not yet polled.
	Errors []provider.LaunchError `json:"errors,omitempty"`

	dirty bool
}

// requestRecord is a served launch request.
type requestRecord struct {
	NodeType string    `json:"node_type"`
	Count    int       `json:"count"`
	At       time.Time `json:"at"`
}

// instanceRecord is one instance.
type instanceRecord struct {
	ID        string                 `json:"id"`
	NodeType  string                 `json:"node_type"`
	RequestID string                 `json:"request_id"`
	State     provider.InstanceState `json:"state"`
	IP        string                 `json:"ip"`
	// Dir is the instance's temp dir (absolute).
	Dir string `json:"dir"`
	// Pid is the node process (0 before it was started).
	Pid        int       `json:"pid"`
	LaunchedAt time.Time `json:"launched_at"`
	// StartedAt is when the node process was started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Argv is the node's command line (without the token, which only its
	// environment holds), for a provider restarted before it started it.
	Argv []string `json:"argv"`
}

// state is every cluster's state, read under the lock.
type state struct {
	dir      string
	clusters map[string]*clusterState
}

// cluster returns the state of the named cluster (empty if it has none).
func (s *state) cluster(name string) *clusterState {
	c, ok := s.clusters[name]
	if !ok {
		c = &clusterState{Version: stateVersion, Cluster: name, Requests: map[string]requestRecord{}}
		s.clusters[name] = c
	}
	return c
}

// instance returns the cluster's instance id.
func (c *clusterState) instance(id string) *instanceRecord {
	for _, in := range c.Instances {
		if in.ID == id {
			return in
		}
	}
	return nil
}

// remove drops the cluster's instance id.
func (c *clusterState) remove(id string) {
	c.Instances = slices.DeleteFunc(c.Instances, func(in *instanceRecord) bool { return in.ID == id })
	c.dirty = true
}

// addError records a LaunchError for PollErrors.
func (c *clusterState) addError(r provider.LaunchError) {
	c.Errors = append(c.Errors, r)
	c.dirty = true
}

// prune forgets request ids older than requestTTL that have no instance
// left.
func (c *clusterState) prune(now time.Time) {
	for id, r := range c.Requests {
		if now.Sub(r.At) < requestTTL {
			continue
		}
		if !slices.ContainsFunc(c.Instances, func(in *instanceRecord) bool { return in.RequestID == id }) {
			delete(c.Requests, id)
			c.dirty = true
		}
	}
}

// usedIPs and usedDirs are the addresses and temp dirs of every instance
// of every cluster.
func (s *state) usedIPs() map[string]bool {
	used := map[string]bool{}
	for _, c := range s.clusters {
		for _, in := range c.Instances {
			used[in.IP] = true
		}
	}
	return used
}

func (s *state) usedDirs() map[string]bool {
	used := map[string]bool{}
	for _, c := range s.clusters {
		for _, in := range c.Instances {
			used[in.Dir] = true
		}
	}
	return used
}

// freeDir returns the shortest instance dir state_dir/_<n> that is not
// in used and does not exist.
func (s *state) freeDir(used map[string]bool) (string, error) {
	for n := 1; n < 1<<20; n++ {
		d := filepath.Join(s.dir, fmt.Sprintf("%s%d", instanceDirPrefix, n))
		if used[d] {
			continue
		}
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			return d, nil
		}
	}
	return "", fmt.Errorf("no free instance directory under %s", s.dir)
}

// loadState reads every cluster's state file under dir.
func loadState(dir string) (*state, error) {
	clusters, err := statedir.ReadSubdirs[clusterState](dir, stateFile)
	if err != nil {
		return nil, fmt.Errorf("reading state_dir: %w", err)
	}
	for name, c := range clusters {
		path := filepath.Join(dir, name, stateFile)
		if c.Version != stateVersion {
			return nil, fmt.Errorf("the state file %s has version %d; this provider reads version %d", path, c.Version, stateVersion)
		}
		if c.Cluster != name {
			return nil, fmt.Errorf("the state file %s is of cluster %q", path, c.Cluster)
		}
		if c.Requests == nil {
			c.Requests = map[string]requestRecord{}
		}
	}
	return &state{dir: dir, clusters: clusters}, nil
}

// save writes the state files of the clusters that changed, atomically.
func (s *state) save() error {
	for name, c := range s.clusters {
		if !c.dirty {
			continue
		}
		if err := statedir.WriteJSON(filepath.Join(s.dir, name, stateFile), c, 0o600); err != nil {
			return fmt.Errorf("writing the state of cluster %q: %w", name, err)
		}
		c.dirty = false
	}
	return nil
}
