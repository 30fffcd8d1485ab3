// Command goray-provider-local is goray's local provider plugin: the
// instances it launches are real goray nodes started as processes on this
// machine, each with a loopback address of its own and a temp dir of its
// own under state_dir — how Ray tests autoscaling on one machine, and
// handy for development. The implementation is package localprovider.
//
// A cluster file names it with a block such as
//
//	provider "local" {
//	  config {
//	    state_dir    = "/var/tmp/goray-local"   # default $TMPDIR/goray-local; absolute, at most 29 bytes
//	    goray_binary = "/usr/local/bin/goray"   # default: the head's goray, else next to this plugin, else PATH
//	    ip_range     = "127.0.1.1-127.0.1.254"  # default; one address per node
//	    stop_timeout = "10s"                    # default; SIGTERM, then SIGKILL
//	  }
//	}
//
// with the binary installed as <plugin_dir>/goray-provider-local. A node
// type's node_config takes extra_args, further `goray start` flags.
//
// Each node runs `goray start --address <head> --node-ip <ip> --temp-dir
// <state_dir>/_<n> --block --num-cpus ... --memory ... --resources ...
// --labels ...` (provider.NodeSpec.StartArgs), after the cluster's
// setup commands when it has any, detached (a session of its own: it
// outlives a restart of the provider) with the cluster token in
// GORAY_AUTH_TOKEN. The cluster's state is state_dir/<cluster>/instances.json,
// so a restarted provider, or `goray down` next to the head's, finds the
// instances again and never launches a request id twice. Terminating an
// instance sends SIGTERM to its node's process group, SIGKILL after
// stop_timeout, and removes its temp dir. A node that exits before it
// serves is reported by PollErrors with the end of its output.
//
// The state_dir is where `goray down` finds the instances: with the
// default ($TMPDIR/goray-local), run it with the $TMPDIR `goray up` had,
// or set state_dir in the cluster file.
package main
