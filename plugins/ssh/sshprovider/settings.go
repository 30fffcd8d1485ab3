package sshprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider/statedir"
)

// Config is the provider's config block:
//
//	provider "ssh" {
//	  config {
//	    hosts            = ["10.0.0.11", "10.0.0.12:2222"]  # required; one node per host
//	    user             = "goray"                         # default: the user running the provider
//	    private_key_file = "~/.ssh/id_ed25519"             # default: the ssh agent ($SSH_AUTH_SOCK)
//	    known_hosts_file = "~/.ssh/known_hosts"            # required: host keys are checked against it
//	    port             = 22                              # for hosts given without one
//	    connect_timeout  = "10s"
//	    remote_dir       = "/tmp/goray-ssh-goray"          # default /tmp/goray-ssh-<user>; may hold {host} and {port}
//	    goray_binary     = "/usr/local/bin/goray"          # local; default: the head's goray, next to the plugin, PATH
//	    state_dir        = "/var/tmp/goray-ssh"            # local; default $TMPDIR/goray-ssh
//	    stop_timeout     = "10s"
//	  }
//	}
type Config struct {
	// Hosts are the machines nodes run on, host or host:port.
	Hosts []string `hcl:"hosts,required" doc:"The hosts nodes run on, each \"host\" or \"host:port\" (\"[v6addr]:port\"); each runs at most one node of any cluster of this provider."`
	// User is the SSH user.
	User string `hcl:"user" doc:"The user to log in as on every host (default: the user running the provider)."`
	// PrivateKeyFile is the SSH private key.
	PrivateKeyFile string `hcl:"private_key_file" doc:"The private key to log in with (OpenSSH or PEM, unencrypted; ~/ is the provider's home). Default: the keys of the ssh agent at $SSH_AUTH_SOCK."`
	// KnownHostsFile holds the hosts' keys.
	KnownHostsFile string `hcl:"known_hosts_file,required" doc:"The known_hosts file every host's key is checked against (~/ is the provider's home); a host missing from it, or with another key, is refused."`
	// Port is the SSH port of hosts given without one.
	Port int `hcl:"port" default:"22" doc:"The SSH port of hosts given without one."`
	// ConnectTimeout bounds connecting and logging in to a host.
	ConnectTimeout time.Duration `hcl:"connect_timeout" default:"10s" doc:"How long connecting and logging in to a host may take."`
	// RemoteDir is where the provider keeps its files on each host.
	RemoteDir string `hcl:"remote_dir" doc:"The directory on each host holding the goray binaries, the host's instance record, the cluster token and the node's temp dir: absolute, at most 32 bytes once {host} and {port} are replaced by the host's name and port (the node's unix sockets live under it). Default /tmp/goray-ssh-<user>."`
	// GorayBinary is the local goray binary copied to the hosts.
	GorayBinary string `hcl:"goray_binary" doc:"The goray binary copied to the hosts, a path on this machine (default: the goray running the head, else goray next to the plugin binary, else on PATH). It must run on the hosts (same OS and architecture)."`
	// StateDir is the provider's local state.
	StateDir string `hcl:"state_dir" doc:"Directory on this machine of the provider's state: launch requests served, instances, errors not yet polled (default $TMPDIR/goray-ssh). Created if missing."`
	// StopTimeout is how long a node may take to shut down.
	StopTimeout time.Duration `hcl:"stop_timeout" default:"10s" doc:"How long a terminated node may take to shut down (goray stop --grace) before it is killed."`
}

// NodeConfig is a node type's node_config block.
type NodeConfig struct {
	// Hosts restricts the node type to some of the provider's hosts.
	Hosts []string `hcl:"hosts" doc:"The hosts this node type may run on, a subset of the provider's hosts, written the same way (default: all of them)."`
	// ExtraArgs are further `goray start` flags.
	ExtraArgs []string `hcl:"extra_args" doc:"Further flags for goray start, e.g. [\"--log-level\", \"debug\"]."`
}

// maxRemoteDir bounds the length of a host's remote_dir: the node's temp
// dir is remote_dir/n, and its unix sockets live at
// <temp dir>/session_<date>_<pid>/sockets/worker-<16 hex>.sock, about 73
// bytes more; socket paths must stay within 107 bytes.
const maxRemoteDir = 107 - 73 - len("/"+nodeDirName)

// host is one host of the config.
type host struct {
	// key is the canonical host:port: the host's name in state, records
	// and known_hosts.
	key string
	// name is the host without its port: the instances' Address.
	name string
	port int
	// dir is the host's remote_dir.
	dir string
}

// settings is a validated Config.
type settings struct {
	hosts       []*host
	byKey       map[string]*host
	user        string
	auth        authSource
	knownHosts  string
	timeout     time.Duration
	goray       string // "" when none was found: launches without NodeSpec.GorayBinary fail
	stateDir    string
	stopTimeout time.Duration
	state       *statedir.Dir
	// conns are the SSH connections made with these settings.
	conns *conns
}

// lookup returns the hosts a node_config hosts entry names: host:port
// names one; a host without a port names every host of that name.
func (s *settings) lookup(entry string) []*host {
	e := strings.TrimSpace(entry)
	if h, ok := s.byKey[e]; ok {
		return []*host{h}
	}
	if name, port, err := net.SplitHostPort(e); err == nil {
		if h, ok := s.byKey[net.JoinHostPort(name, port)]; ok {
			return []*host{h}
		}
		return nil
	}
	name := strings.TrimSuffix(strings.TrimPrefix(e, "["), "]")
	var out []*host
	for _, h := range s.hosts {
		if h.name == name {
			out = append(out, h)
		}
	}
	return out
}

// authSource gives the SSH auth methods of a connection attempt and
// releases what they hold (an agent connection) afterwards.
type authSource func() ([]ssh.AuthMethod, func(), error)

// DefaultStateDir is state_dir when the config leaves it out:
// $TMPDIR/goray-ssh.
func DefaultStateDir() string { return filepath.Join(os.TempDir(), "goray-ssh") }

// DefaultRemoteDir is remote_dir when the config leaves it out, for user.
func DefaultRemoteDir(user string) string { return "/tmp/goray-ssh-" + user }

func newSettings(cfg Config) (*settings, error) {
	s := &settings{timeout: cfg.ConnectTimeout, stopTimeout: cfg.StopTimeout, byKey: map[string]*host{}, conns: &conns{}}
	if s.timeout <= 0 {
		return nil, fmt.Errorf("connect_timeout %v is not positive", cfg.ConnectTimeout)
	}
	if s.stopTimeout <= 0 {
		return nil, fmt.Errorf("stop_timeout %v is not positive", cfg.StopTimeout)
	}
	if cfg.Port == 0 {
		cfg.Port = 22
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("port %d is not a TCP port", cfg.Port)
	}
	s.user = cfg.User
	if s.user == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("no user given and the current user is unknown: %w", err)
		}
		s.user = u.Username
	}
	remoteDir := cfg.RemoteDir
	if remoteDir == "" {
		remoteDir = DefaultRemoteDir(s.user)
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("hosts is empty: name at least one host")
	}
	dirs := map[string]string{}
	for _, h := range cfg.Hosts {
		hs, err := parseHost(h, cfg.Port)
		if err != nil {
			return nil, err
		}
		if _, dup := s.byKey[hs.key]; dup {
			return nil, fmt.Errorf("hosts: %q is listed twice", hs.key)
		}
		hs.dir, err = expandRemoteDir(remoteDir, hs)
		if err != nil {
			return nil, err
		}
		// Hosts of one name share a machine: distinct ports need distinct
		// directories.
		if other, ok := dirs[hs.name+" "+hs.dir]; ok {
			return nil, fmt.Errorf("hosts %s and %s would share remote_dir %q on one machine: put {port} in remote_dir", other, hs.key, hs.dir)
		}
		dirs[hs.name+" "+hs.dir] = hs.key
		s.hosts = append(s.hosts, hs)
		s.byKey[hs.key] = hs
	}
	if cfg.KnownHostsFile == "" {
		return nil, errors.New("known_hosts_file is required: the hosts' keys are checked against it")
	}
	var err error
	if s.knownHosts, err = expandHome(cfg.KnownHostsFile); err != nil {
		return nil, fmt.Errorf("known_hosts_file: %w", err)
	}
	if _, err := knownHostsCallback(s.knownHosts); err != nil {
		return nil, err
	}
	if s.auth, err = newAuth(cfg.PrivateKeyFile); err != nil {
		return nil, err
	}
	if s.goray, err = findGoray(cfg.GorayBinary); err != nil {
		return nil, err
	}
	dir := cfg.StateDir
	if dir == "" {
		dir = DefaultStateDir()
	}
	if dir, err = expandHome(dir); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("state_dir %q is not an absolute path", cfg.StateDir)
	}
	s.stateDir = filepath.Clean(dir)
	if s.state, err = statedir.Open(s.stateDir); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	return s, nil
}

// parseHost reads a hosts entry: host, host:port, [v6]:port or a bare
// IPv6 address.
func parseHost(s string, defPort int) (*host, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return nil, errors.New("hosts: an entry is empty")
	}
	name, portStr, err := net.SplitHostPort(in)
	if err != nil {
		// No port: a name, an IPv4 address or a bare IPv6 address.
		name, portStr = strings.TrimSuffix(strings.TrimPrefix(in, "["), "]"), strconv.Itoa(defPort)
		if strings.ContainsAny(name, "[]") || (strings.Contains(name, ":") && net.ParseIP(name) == nil) {
			return nil, fmt.Errorf("hosts: %q is not host, host:port or [IPv6]:port", s)
		}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("hosts: %q has no valid port", s)
	}
	if name == "" || strings.ContainsAny(name, " \t/'\"\\$`{}") {
		return nil, fmt.Errorf("hosts: %q is not a host name or address", s)
	}
	return &host{key: net.JoinHostPort(name, strconv.Itoa(port)), name: name, port: port}, nil
}

// expandRemoteDir returns remote_dir for h: {host} and {port} replaced,
// checked to be absolute and short enough.
func expandRemoteDir(tmpl string, h *host) (string, error) {
	d := strings.NewReplacer("{host}", h.name, "{port}", strconv.Itoa(h.port)).Replace(tmpl)
	if !path.IsAbs(d) {
		return "", fmt.Errorf("remote_dir %q is not an absolute path (for host %s)", d, h.key)
	}
	d = path.Clean(d)
	if d == "/" {
		return "", fmt.Errorf("remote_dir %q is the root directory", tmpl)
	}
	if len(d) > maxRemoteDir {
		return "", fmt.Errorf("remote_dir %q (for host %s) is %d bytes long; the nodes' unix sockets live under it and their paths must stay within 107 bytes, so use a remote_dir of at most %d bytes", d, h.key, len(d), maxRemoteDir)
	}
	return d, nil
}

// expandHome replaces a leading ~/ with the home directory.
func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%q: %w", p, err)
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}

// findGoray returns the local goray binary: configured (which must
// exist), else the goray running the node that started this plugin
// (plugin.EnvGorayBinary), else goray next to this executable, else on
// PATH, else "" (a launch must then name one on the hosts).
func findGoray(configured string) (string, error) {
	if configured != "" {
		p, err := expandHome(configured)
		if err != nil {
			return "", fmt.Errorf("goray_binary: %w", err)
		}
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("goray_binary %q: %w", configured, err)
		}
		return filepath.Abs(path)
	}
	executable := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
	}
	if env := os.Getenv(plugin.EnvGorayBinary); env != "" && executable(env) {
		return env, nil
	}
	if exe, err := os.Executable(); err == nil {
		if next := filepath.Join(filepath.Dir(exe), "goray"); executable(next) {
			return next, nil
		}
	}
	if path, err := exec.LookPath("goray"); err == nil {
		return filepath.Abs(path)
	}
	return "", nil
}

// binaryHash is the sha256 of a local file, remembered by path, size and
// modification time.
type binaryHash struct {
	mu    sync.Mutex
	cache map[string]hashEntry
}

type hashEntry struct {
	size  int64
	mtime time.Time
	sum   string
}

// sum returns the file's sha256 (hex) and size.
func (b *binaryHash) sum(p string) (string, int64, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.cache[p]; ok && e.size == st.Size() && e.mtime.Equal(st.ModTime()) {
		return e.sum, e.size, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if b.cache == nil {
		b.cache = map[string]hashEntry{}
	}
	b.cache[p] = hashEntry{size: n, mtime: st.ModTime(), sum: sum}
	return sum, n, nil
}
