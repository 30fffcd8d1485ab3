# A node for examples/spill-s3: a small object store that spills to S3.
# The endpoint and credentials come from the environment, as for the AWS
# SDKs: AWS_ENDPOINT_URL (http://127.0.0.1:9000 for a local MinIO; unset for
# AWS), AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials).

object_store {
  memory          = "256MiB"
  spill_threshold = 0.8
}

plugin_dir = "../../bin/plugins" # `make plugins` builds goray-storage-s3 there

plugin "storage" "s3" {
  config {
    bucket        = "goray-spill"
    prefix        = "spill"
    create_bucket = true # a new bucket is refused without it
  }
}

spilling {
  storage       = "s3"
  min_file_size = "64MiB"
}
