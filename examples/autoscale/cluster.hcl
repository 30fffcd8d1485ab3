# The cluster of examples/autoscale: a head with one CPU and up to three
# worker nodes of two CPUs, each a goray node process on its own loopback
# address (127.0.1.x), started and stopped by the local provider plugin.

cluster_name   = "autoscale-demo"
head_node_type = "head"
max_workers    = 3
idle_timeout   = "15s" # short, so that the example sees the nodes go

plugin_dir = "../../bin/plugins" # `make plugins` builds goray-provider-local there

provider "local" {
  # state_dir defaults to $TMPDIR/goray-local: the provider's state and
  # each instance's temp dir.
}

node_type "head" {
  resources = { CPU = 1 }
}

node_type "cpu" {
  resources   = { CPU = 2, memory = "1GiB" }
  min_workers = 0
  max_workers = 3
}
