# A node for examples/allreduce: it loads the collective transport plugin,
# which `make plugins` builds into bin/plugins.
plugin_dir = "../../bin/plugins" # relative to this file
plugin "transport" "collective" {}
