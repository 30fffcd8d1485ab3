# A complete goray node config: every setting the loader knows.
cluster_name = "demo"
node_name    = "n1"

head {
  address = "127.0.0.1:6390"
}

port        = 6380
raylet_port = 7001
node_ip     = "127.0.0.1"
temp_dir    = "/var/tmp/goray"
log_level   = "debug"
labels = { zone = "a", rack = "r7" }

resources {
  CPU    = 2
  GPU    = 1
  memory = "4GiB"
  custom = { accel = 1, fpga = 0.5 }
}

object_store {
  memory          = "2GiB"
  spill_threshold = 0.75
  inline_limit    = "64KiB"
}

worker_pool {
  prestart      = 2
  max_idle      = 4
  idle_timeout  = "90s"
  start_timeout = "45s"
}

health_check {
  period            = "500ms"
  failure_threshold = 3
}

plugin_dir = "./bin/plugins"

plugin "transport" "shm" {}

plugin "storage" "s3" {
  sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
  config {
    endpoint = "127.0.0.1:9000"
    bucket   = "goray-spill"
  }
}

node_type "cpu-small" {
  resources   = { CPU = 2 }
  min_workers = 0
  max_workers = 4
}

node_type "gpu" {
  resources   = { CPU = 8, GPU = 1 }
  min_workers = 1
  max_workers = 2
}

spilling {
  storage              = "s3"
  min_file_size        = "64MiB"
  max_objects_per_file = 500
  keep_files           = true
  wait                 = "30s"
}

data_dir = "state" # relative to this file

gcs {
  storage           = "redis"
  reconnect_timeout = "30s"
  redis {
    address  = "127.0.0.1:6379"
    username = "goray"
    password = "full-hcl-password" # better: $GORAY_GCS_REDIS_PASSWORD
    db       = 1
    prefix   = "demo"
    tls {
      server_name = "localhost" # the system's roots verify the server
    }
  }
}
