# A node for examples/spill-s3: a small object store that spills to S3.
# Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or
# ~/.aws/credentials); set endpoint to your MinIO or leave it out for AWS.

object_store {
  memory          = "256MiB"
  spill_threshold = 0.8
}

plugin_dir = "../../bin/plugins" # `make plugins` builds goray-storage-s3 there

plugin "storage" "s3" {
  config {
    endpoint      = "127.0.0.1:9000"
    bucket        = "goray-spill"
    prefix        = "spill"
    tls           = false
    create_bucket = true
  }
}

spilling {
  storage       = "s3"
  min_file_size = "64MiB"
}
