# A complete goray cluster file (goray up cluster.hcl) on the local
# provider: the cluster's settings, its node types, and the head's own node
# settings (everything a node file accepts).
cluster_name    = "demo"
max_workers     = 4 # all worker types together
idle_timeout    = "1m"
upscaling_speed = 2.0
head_node_type  = "head"

plugin_dir = "./bin/plugins"

# The plugin goray-provider-local in plugin_dir: instances are goray nodes
# on this machine, each on its own loopback address.
provider "local" {
  sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
  config {
    state_dir = "/tmp/goray-local"
    ip_range  = "127.0.1.1-127.0.1.254"
  }
}

# Run on every instance before goray starts (where the provider has a shell).
setup_commands = [
  "echo starting",
  "mkdir -p /tmp/goray-work",
]

node_type "head" {
  resources = { CPU = 1 }
  labels    = { role = "head" }
}

node_type "cpu" {
  resources   = { CPU = 2, memory = "4GiB" }
  labels      = { role = "worker" }
  min_workers = 1
  max_workers = 3
  node_config {
    extra_args = ["--log-level", "debug"]
  }
}

node_type "accel" {
  resources = { CPU = 1, GPU = 1, memory = 8589934592, accel = 2 }
  # max_workers: the global max_workers
}

# The head itself.
head {
  address = "127.0.0.1:6390"
}
node_ip  = "127.0.0.1"
temp_dir = "/var/tmp/goray"
labels   = { zone = "a" }

object_store {
  memory = "1GiB"
}

health_check {
  period            = "1s"
  failure_threshold = 5
}

auth {
  token_file = "token"
}

gcs {
  storage = "bolt"
}

plugin "transport" "shm" {}
