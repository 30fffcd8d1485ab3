// Command goray-provider-ssh is goray's SSH provider plugin: the instances
// it launches are goray nodes on a fixed list of hosts (on-prem machines,
// VMs you already have) reached over SSH, at most one node per host. The
// implementation is package sshprovider; docs/ssh.md is the guide.
//
// A cluster file names it with a block such as
//
//	provider "ssh" {
//	  config {
//	    hosts            = ["10.0.0.11", "10.0.0.12", "10.0.0.13:2222"]
//	    user             = "goray"
//	    private_key_file = "~/.ssh/id_ed25519"   # default: the ssh agent
//	    known_hosts_file = "~/.ssh/known_hosts"  # required: host keys are checked
//	    remote_dir       = "/tmp/goray-ssh"      # default /tmp/goray-ssh-<user>
//	  }
//	}
//
// with the binary installed as <plugin_dir>/goray-provider-ssh. A node
// type's node_config takes hosts (a subset of the provider's) and
// extra_args (further `goray start` flags).
//
// Launching copies the goray binary to <remote_dir>/bin/<sha256>/goray on
// the host unless it is there, writes the cluster token to a file only the
// SSH user reads, runs the cluster's setup commands and runs `goray start
// --address <head> --node-ip <host> --temp-dir <remote_dir>/n
// --auth-token-file <remote_dir>/token ...`, which returns once the node
// serves. Terminating runs `goray stop` on the node's temp dir. The
// requests served are kept in state_dir on this machine and what runs in
// <remote_dir>/instance.json on each host, so a restarted provider (or
// `goray down`) finds the nodes again, from the hosts alone if need be.
package main
