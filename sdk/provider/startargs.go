package provider

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// StartOptions are what an instance adds to its NodeSpec to make the
// command line of its node (NodeSpec.StartArgs).
type StartOptions struct {
	// Goray is the goray binary on the instance; "" is the spec's
	// GorayBinary, else "goray" (on the instance's PATH).
	Goray string
	// NodeIP is the address the node listens on and advertises to the
	// other nodes (--node-ip); "" leaves goray's default.
	NodeIP string
	// TempDir is the node's root of session directories (--temp-dir); ""
	// leaves goray's default.
	TempDir string
	// InstanceID is the instance's id: the node's name and its
	// LabelInstanceID label (required).
	InstanceID string
	// Block runs the node in the foreground (--block), for a provider that
	// keeps the process itself; without it `goray start` returns once the
	// node serves.
	Block bool
	// ReadyFile, when set, is where the node writes its info once it
	// serves (--ready-file; with Block).
	ReadyFile string
	// TokenFile, when set, is the file the node reads the cluster token
	// from (--auth-token-file); without it the provider gives the node
	// NodeSpec.AuthToken in its environment (GORAY_AUTH_TOKEN). The token
	// itself is never on the command line.
	TokenFile string
	// Extra are further flags for goray start (a node type's node_config).
	Extra []string
}

// StartArgs returns the command line of the node of an instance: `goray
// start --address <head> ...` with the spec's resources and labels (plus
// LabelInstanceID) and o's instance-specific settings. The cluster token
// is not on it (see StartOptions.TokenFile). Resources that are negative,
// NaN or infinite, and an object store of less than a byte, are
// ErrInvalidRequest.
func (s NodeSpec) StartArgs(o StartOptions) ([]string, error) {
	if o.InstanceID == "" {
		return nil, fmt.Errorf("%w: StartOptions.InstanceID is empty", ErrInvalidRequest)
	}
	goray := o.Goray
	if goray == "" {
		goray = s.GorayBinary
	}
	if goray == "" {
		goray = "goray"
	}
	args := []string{goray, "start", "--address", s.HeadAddress}
	if o.NodeIP != "" {
		args = append(args, "--node-ip", o.NodeIP)
	}
	if o.TempDir != "" {
		args = append(args, "--temp-dir", o.TempDir)
	}
	if o.Block {
		args = append(args, "--block")
	}
	if o.ReadyFile != "" {
		args = append(args, "--ready-file", o.ReadyFile)
	}
	if o.TokenFile != "" {
		args = append(args, "--auth-token-file", o.TokenFile)
	}
	args = append(args, "--node-name", o.InstanceID)
	custom := map[string]float64{}
	for _, name := range slices.Sorted(maps.Keys(s.Resources)) {
		v := s.Resources[name]
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: resource %q has amount %v; want a finite amount of at least 0", ErrInvalidRequest, name, v)
		}
		switch name {
		case ResourceCPU:
			args = append(args, "--num-cpus", strconv.FormatFloat(v, 'f', -1, 64))
		case ResourceGPU:
			args = append(args, "--num-gpus", strconv.FormatFloat(v, 'f', -1, 64))
		case ResourceMemory:
			if v >= math.MaxInt64 {
				return nil, fmt.Errorf("%w: resource %q is %v bytes: too large", ErrInvalidRequest, name, v)
			}
			args = append(args, "--memory", strconv.FormatInt(int64(v), 10))
		case ResourceObjectStoreMemory:
			if v < 1 || v >= math.MaxInt64 {
				return nil, fmt.Errorf("%w: resource %q is %v bytes; the object store needs at least 1", ErrInvalidRequest, name, v)
			}
			args = append(args, "--object-store-memory", strconv.FormatInt(int64(v), 10))
		default:
			custom[name] = v
		}
	}
	if len(custom) > 0 {
		b, err := json.Marshal(custom)
		if err != nil {
			return nil, err
		}
		args = append(args, "--resources", string(b))
	}
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelInstanceID] = o.InstanceID
	b, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	args = append(args, "--labels", string(b))
	return append(args, o.Extra...), nil
}

// ShellJoin quotes args for a POSIX shell (sh -c, an SSH command, user
// data): each argument in single quotes unless it is made only of
// characters no shell treats specially.
func ShellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
