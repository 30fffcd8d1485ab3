# examples/transport-template/node.hcl
plugin_dir = "../../bin/plugins"   # relative paths are relative to this file

plugin "transport" "tcp-template" {
  # Optional: refuse to run a binary with another checksum.
  # sha256 = "<64 hex digits of sha256sum goray-transport-tcp-template>"

  config {
    listen_address = "127.0.0.1:0"    # data listener; port 0 picks a free port
    segment_prefix = "goray-t-tcp-"   # names of segments receives allocate
    dial_timeout   = "5s"
  }
}
