// Command goray-storage-s3 is goray's S3 storage plugin: it spills objects
// to a bucket of AWS S3 or of an S3-compatible endpoint such as MinIO. The
// implementation is package s3store.
//
// The node host runs it for a block such as
//
//	plugin "storage" "s3" {
//	  config {
//	    endpoint      = "127.0.0.1:9000"  # host:port; empty: $AWS_ENDPOINT_URL, else AWS S3
//	    bucket        = "goray-spill"     # required
//	    prefix        = "cluster-a"
//	    region        = "us-east-1"
//	    tls           = false             # default true
//	    create_bucket = true              # default false
//	    part_size     = "16MiB"           # at least 5MiB
//	    concurrency   = 4                 # parts uploaded in parallel
//	    timeout       = "30s"
//	    # access_key, secret_key, session_token: else the AWS chain
//	    # (AWS_ACCESS_KEY_ID..., ~/.aws/credentials with AWS_PROFILE, IAM).
//	  }
//	}
//
// with the binary installed as <plugin_dir>/goray-storage-s3.
package main
