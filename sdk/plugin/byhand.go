package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// RunByHand reports whether the process was not started by a goray host:
// the handshake's magic cookie is not in its environment.
func RunByHand() bool {
	return os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue
}

// ByHandMessage is what a plugin binary run by hand (RunByHand) prints to
// stderr before exiting with status 1: what the plugin is (kind, name,
// version, API versions) and how to use it — install it into a plugin
// directory and declare it in a node's config — with the config block's
// required attributes. binary is the path it was run as (os.Args[0]).
func ByHandMessage(cfg ServeConfig, binary string) string {
	vs := make([]int, 0, len(cfg.APIVersions))
	for v := range cfg.APIVersions {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	version := cfg.Version
	if version == "" {
		version = "(none)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s is a goray plugin: kind %s, name %q, version %s, API versions %v.\n", filepath.Base(binary), cfg.Kind, cfg.Name, version, vs)
	fmt.Fprintf(&b, "It is not run by hand: a goray node starts it for a plugin block of its config.\n\n")
	fmt.Fprintf(&b, "Install it into the plugin directory of a node config (it is copied as goray-%s-%s and its sha256 locked):\n\n", cfg.Kind, cfg.Name)
	fmt.Fprintf(&b, "    goray plugins install --config goray.hcl %s\n\n", binary)
	fmt.Fprintf(&b, "and declare it in the config (goray.hcl):\n\n")
	fmt.Fprintf(&b, "    plugin_dir = \"plugins\"\n")
	fmt.Fprintf(&b, "    plugin %q %q {\n", cfg.Kind, cfg.Name)
	var required []string
	for name, a := range cfg.Schema.Attributes {
		if a.Required {
			required = append(required, name)
		}
	}
	slices.Sort(required)
	if len(required) > 0 || len(cfg.Schema.Attributes) > 0 || len(cfg.Schema.Blocks) > 0 {
		fmt.Fprintf(&b, "      config {\n")
		for _, name := range required {
			fmt.Fprintf(&b, "        %s = <%s>\n", name, cfg.Schema.Attributes[name].Type)
		}
		if n := len(cfg.Schema.Attributes) - len(required); n > 0 {
			fmt.Fprintf(&b, "        # and %d optional attribute(s): goray plugins check %s lists them\n", n, binary)
		}
		fmt.Fprintf(&b, "      }\n")
	}
	fmt.Fprintf(&b, "    }\n")
	return b.String()
}
