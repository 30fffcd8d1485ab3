# A node for examples/weight-sync: it loads the one-sided transport plugin,
# which `make plugins` builds into bin/plugins.
plugin_dir = "../../bin/plugins" # relative to this file
plugin "transport" "onesided" {}
