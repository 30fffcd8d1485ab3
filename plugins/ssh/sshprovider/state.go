package sshprovider

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/statedir"
)

// The provider's local state lives in its state_dir (a statedir.Dir):
//
//	state_dir/.lock                 flock'ed around every change
//	state_dir/<cluster>/state.json  one cluster's requests, instances and unpolled errors
//	state_dir/<cluster>/token       the cluster's token (0600), for launches resumed after a restart
//
// Every call reads the state files under the lock, changes them and
// writes them back atomically, so several provider processes on one
// state_dir (the head's autoscaler and `goray down`) and a provider
// restarted after a crash agree on what exists. What runs on a host is
// also written there (remote.go): the state says what was asked for, the
// hosts say what runs.

// stateFile is the name of a cluster's state file.
const stateFile = "state.json"

// tokenFile is the name of a cluster's token file in its state dir.
const tokenFile = "token"

// stateVersion is the version of the state file format.
const stateVersion = 1

// requestTTL is how long a served request id is remembered once none of
// its instances is left: a retry of a launch comes within seconds, not
// days.
const requestTTL = 7 * 24 * time.Hour

// removedTTL is how long the id of a terminated instance is remembered,
// so that a host scan that started before it was gone does not bring it
// back.
const removedTTL = 10 * time.Minute

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
	// Removed are the ids of instances terminated lately, with when.
	Removed map[string]time.Time `json:"removed,omitempty"`
	// Outages are the hosts of the cluster's instances that could not be
	// reached, reported once until they answer again, with since when.
	Outages map[string]time.Time `json:"outages,omitempty"`

	dirty bool
}

// requestRecord is a served launch request.
type requestRecord struct {
	NodeType string    `json:"node_type"`
	Count    int       `json:"count"`
	At       time.Time `json:"at"`
}

// instanceRecord is one instance: a node on a host.
type instanceRecord struct {
	ID        string                 `json:"id"`
	NodeType  string                 `json:"node_type"`
	RequestID string                 `json:"request_id"`
	State     provider.InstanceState `json:"state"`
	// Host is the host, host:port as the config names it.
	Host string `json:"host"`
	// Dir is the host's remote_dir.
	Dir        string    `json:"dir"`
	LaunchedAt time.Time `json:"launched_at"`
	// Pid is the node's process on the host (0 before it was started).
	Pid int `json:"pid,omitempty"`
	// StartedAt is when its node served.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Spec is what to start (nil for an instance adopted from its host).
	Spec *launchSpec `json:"spec,omitempty"`
	// Goray is the goray binary on the host ("" until known).
	Goray string `json:"goray,omitempty"`
	// Worker is the provider driving the instance (launching or stopping
	// it), if any.
	Worker *worker `json:"worker,omitempty"`
	// StopFailedAt is when stopping it last failed: it is tried again
	// after stopRetry.
	StopFailedAt time.Time `json:"stop_failed_at,omitzero"`
}

// launchSpec is how an instance's node is started: the launch request's
// node spec without its token, which the cluster's token file holds.
type launchSpec struct {
	Node provider.NodeSpec `json:"node"`
	// Extra are the node type's extra_args.
	Extra []string `json:"extra,omitempty"`
	// Local is the local goray binary copied to the host, with its sha256
	// and size ("" when Node.GorayBinary names one on the host).
	Local  string `json:"local,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

// worker is a provider process driving an instance.
type worker struct {
	Pid int `json:"pid"`
	// Start is the process' start time (/proc/<pid>/stat), so that a
	// reused pid is not taken for it.
	Start uint64 `json:"start"`
	// Owner is the Provider object's id within the process.
	Owner string `json:"owner"`
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

// remove drops the cluster's instance id and remembers it was removed.
func (c *clusterState) remove(id string, now time.Time) {
	c.Instances = slices.DeleteFunc(c.Instances, func(in *instanceRecord) bool { return in.ID == id })
	if c.Removed == nil {
		c.Removed = map[string]time.Time{}
	}
	c.Removed[id] = now
	c.dirty = true
}

// addError records a LaunchError for PollErrors.
func (c *clusterState) addError(r provider.LaunchError) {
	c.Errors = append(c.Errors, r)
	c.dirty = true
}

// prune forgets request ids older than requestTTL that have no instance
// left, and removed ids older than removedTTL.
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
	for id, at := range c.Removed {
		if now.Sub(at) > removedTTL {
			delete(c.Removed, id)
			c.dirty = true
		}
	}
}

// noteID makes Next at least the number of instance id (an instance
// adopted from its host), so that no id is given twice.
func (c *clusterState) noteID(id string) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return
	}
	if n, err := strconv.Atoi(id[i+1:]); err == nil && n > c.Next && strings.HasPrefix(id, instancePrefix(c.Cluster)) {
		c.Next = n
		c.dirty = true
	}
}

// instancePrefix is how the ids of a cluster's instances start.
func instancePrefix(cluster string) string { return "ssh-" + cluster + "-" }

// hostsInUse returns the hosts of every instance of every cluster.
func (s *state) hostsInUse() map[string]string {
	used := map[string]string{}
	for _, c := range s.clusters {
		for _, in := range c.Instances {
			used[in.Host] = in.ID
		}
	}
	return used
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

// saveToken writes the cluster's token into its state dir (owner-only),
// for launches a restarted provider resumes.
func (s *state) saveToken(cluster, token string) error {
	path := filepath.Join(s.dir, cluster, tokenFile)
	if token == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if b, err := os.ReadFile(path); err == nil && string(b) == token {
		return nil
	}
	return statedir.WriteFile(path, []byte(token), 0o600)
}

// readToken returns the cluster's token ("" when it has none).
func (s *state) readToken(cluster string) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, cluster, tokenFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

// procStart returns the start time of process pid (field 22 of
// /proc/<pid>/stat), or false when it is gone or a zombie.
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	n, err := strconv.ParseUint(f[19], 10, 64)
	return n, err == nil
}
