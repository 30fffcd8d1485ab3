cluster_name = "broken"
log_level    = 3
objekt_store { memory = "2GiB" }
resources {
  cpu    = 2
  memory = "lots"
}
worker_pool {
  idle_timeout = "1 minute"
}
health_check {
  period = "1s"
  failure_treshold = 5
}
labels = { zone = 1 }
plugin "storag" "s3" {}
