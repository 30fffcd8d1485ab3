// Package sshtest is what the SSH provider's tests share beyond
// sdk/provider/providertest/headtest (the head, stand-in goray binaries,
// the leak checks): SSH hosts (the addresses of a real sshd the test
// starts with internal/testservers/sshdtest) with a provider config for
// them.
package sshtest

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/goray-dev/goray/plugins/ssh/sshprovider"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// Hosts are SSH hosts for a test (the addresses of a real sshd the test
// started, internal/testservers/sshdtest), and a root directory under
// which every host has its own remote_dir (Root/<address>).
type Hosts struct {
	// Addrs are the hosts, host:port.
	Addrs []string
	// User, KeyFile and KnownHostsFile are how to log in to them.
	User, KeyFile, KnownHostsFile string
	// Root holds the hosts' remote_dirs: a provider config's remote_dir
	// is Root/{host}.
	Root string
}

// NewHosts returns the hosts at addrs (an sshd's addresses) with a fresh
// Root. When the test ends, any process still running under Root fails
// the test and is killed, and Root is removed (call it after starting the
// sshd, so this happens before the sshd stops).
func NewHosts(t testing.TB, addrs []string, user, keyFile, knownHosts string) *Hosts {
	t.Helper()
	root := headtest.LeakCheckedDir(t, "s")
	return &Hosts{Addrs: addrs, User: user, KeyFile: keyFile, KnownHostsFile: knownHosts, Root: root}
}

// RemoteDir is the remote_dir of the host at address ip.
func (h *Hosts) RemoteDir(ip string) string { return filepath.Join(h.Root, ip) }

// Config returns a provider config for the hosts: the test's key and
// known_hosts, remote_dir Root/{host}, the given goray binary and
// state_dir.
func (h *Hosts) Config(goray, stateDir string) sshprovider.Config {
	return sshprovider.Config{
		Hosts: append([]string(nil), h.Addrs...), User: h.User, PrivateKeyFile: h.KeyFile, KnownHostsFile: h.KnownHostsFile,
		Port: 22, ConnectTimeout: 10 * time.Second, RemoteDir: filepath.Join(h.Root, "{host}"), GorayBinary: goray,
		StateDir: stateDir, StopTimeout: 10 * time.Second,
	}
}

// HCL returns the config as the body of a provider's config block.
func HCL(c sshprovider.Config) string {
	hosts, _ := json.Marshal(c.Hosts)
	return fmt.Sprintf("hosts = %s\nuser = %q\nprivate_key_file = %q\nknown_hosts_file = %q\nremote_dir = %q\ngoray_binary = %q\nstate_dir = %q\nconnect_timeout = %q\nstop_timeout = %q\n",
		hosts, c.User, c.PrivateKeyFile, c.KnownHostsFile, c.RemoteDir, c.GorayBinary, c.StateDir, c.ConnectTimeout, c.StopTimeout)
}

// Unreachable returns a loopback address:port nothing listens on.
func Unreachable(t testing.TB, ip string) string {
	t.Helper()
	return net.JoinHostPort(ip, strconv.Itoa(headtest.FreePort(t, ip)))
}
