// Command goray-provider-aws is goray's AWS EC2 provider plugin: the
// instances it launches are EC2 instances whose user data installs goray
// (downloaded from goray_url and checked against goray_sha256), writes the
// cluster token to a root-only file, runs the cluster's setup commands and
// starts a node that joins the head. The implementation is package
// awsprovider; docs/aws.md is the user's guide.
//
// A cluster file names it with a block such as
//
//	provider "aws" {
//	  config {
//	    region       = "us-west-2"
//	    goray_url    = "https://downloads.example.com/goray-linux-amd64"
//	    goray_sha256 = "<64 hex digits>"
//	  }
//	}
//
// with the binary installed as <plugin_dir>/goray-provider-aws, and each
// node type's node_config gives instance_type and image_id (and subnet_id,
// security_group_ids, iam_instance_profile, key_name, spot, spot_max_price,
// root_volume_size, root_volume_type, tags, extra_args). Credentials come
// from the AWS credential chain unless the config gives access_key and
// secret_key; endpoint points it at another EC2-compatible API (the tests
// use moto's).
package main
