// Command goray-storage-fs is goray's local-disk storage plugin, the
// default place objects are spilled to when the object store runs short of
// memory. The implementation is package fsstore.
//
// The node host runs it for a block such as
//
//	plugin "storage" "fs" {
//	  config {
//	    directory = "/var/lib/goray/spill"  # required, absolute; created if missing
//	    fsync     = true                    # default
//	  }
//	}
//
// with the binary installed as <plugin_dir>/goray-storage-fs.
package main
