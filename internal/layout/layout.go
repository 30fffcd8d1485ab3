// Package layout states the rules of goray's folder tree: which tier a
// package belongs to and what it may import. Its test runs `go list` over
// the module and fails when a package imports across the rules, so the tree
// keeps showing the tiers as it grows.
//
// The tiers, from the bottom:
//
//   - internal/...: libraries every part of the runtime shares (ids,
//     codec, protocols, auth, rpc options, the object store, resources,
//     spawn). They import nothing above them. internal/testservers holds
//     the real servers tests and the benchmark run (MinIO, Redis; a GCS,
//     whose package gcstest imports gcs and is exempt from this rule).
//   - sdk/plugin, sdk/transport, sdk/storage (and later plugin kinds): the
//     plugin SDKs a plugin author imports. They import the plugin protocols
//     and little else of the module, never the runtime.
//   - plugins/...: plugins built on those SDKs, like a third party's.
//   - gcs/, raylet/ (its components under raylet/internal/), host/ (the
//     plugin host) and host/node (the node host: the composition root of
//     store, raylet, plugin host and, on the head, GCS): the runtime. The
//     GCS and the raylet talk over gRPC only, never by import.
//   - autoscaler/ (its logic under autoscaler/internal/): the head's
//     autoscaler, which reaches the GCS over gRPC and the provider
//     through the provider SDK, never by importing the runtime's servers.
//   - dashboard/ (the job API under dashboard/jobs, its client under
//     dashboard/jobclient): the head's HTTP server, run by host/node; it
//     reaches the GCS over gRPC and imports no server of the runtime.
//   - state/: the cluster-wide state rows (list, summary, memory,
//     timeline) the CLI prints and the dashboard serves, gathered over
//     gRPC from the GCS and the raylets; it imports no server.
//   - sdk/ray: the application API, with the core worker under
//     sdk/ray/internal/core. It starts embedded nodes through host/node and
//     never reaches into the raylet or the GCS.
//   - cmd/...: apps (the goray CLI, with the benchmark under
//     cmd/goray/internal), examples/ and acceptance/: nothing imports them.
package layout

import (
	"fmt"
	"strings"
)

// Module is the module path every rule is relative to.
const Module = "github.com/goray-dev/goray"

// Rule forbids packages matching From to import packages matching any of
// Deny, unless the import also matches one of Allow. Patterns are module
// relative: "a/b" matches a/b itself, "a/b/..." a/b and everything below.
type Rule struct {
	// Why is said when the rule is broken.
	Why string
	// From selects the importing packages.
	From []string
	// Deny selects the imports the rule refuses.
	Deny []string
	// Allow carves exceptions out of Deny.
	Allow []string
	// Except selects importers the rule does not apply to.
	Except []string
	// Tests applies the rule to test files' imports too.
	Tests bool
}

// pluginTier is everything a plugin author's code links: the plugin SDKs
// and the plugins built on them.
var pluginTier = []string{"sdk/plugin/...", "sdk/transport/...", "sdk/storage/...", "sdk/provider/...", "plugins/...", "examples/transport-template/..."}

// runtime is the part of goray that is not public API and that plugins and
// plugin SDKs must not link.
var runtime = []string{"gcs/...", "raylet/...", "host/...", "autoscaler/...", "dashboard/...", "state/...", "sdk/ray/...", "cmd/...", "config/...", "internal/..."}

// Rules are goray's import rules.
var Rules = []Rule{
	{
		Why:  "plugin SDKs and plugins build only on the plugin SDKs and the plugin protocols, never on the runtime",
		From: pluginTier, Deny: runtime,
		Allow: []string{"internal/proto/...", "internal/auth", "internal/connlimit", "internal/segtrack"},
	},
	{
		Why:  "plugins are separate programs: they import the SDKs, not each other's code or internal libraries",
		From: []string{"plugins/..."}, Deny: []string{"internal/...", "plugins/..."},
		Allow: []string{"plugins/$1/..."},
	},
	{
		Why:  "the autoscaler talks to the GCS over gRPC and to providers through sdk/provider; it imports no server of the runtime",
		From: []string{"autoscaler/..."}, Deny: []string{"gcs/...", "raylet/...", "host/...", "sdk/ray/...", "cmd/...", "plugins/..."},
	},
	{
		Why:  "the dashboard (the head's HTTP server and job API) talks to the GCS over gRPC and runs drivers as processes; it imports no server of the runtime",
		From: []string{"dashboard/..."}, Deny: []string{"gcs/...", "raylet/...", "host/...", "autoscaler/...", "sdk/...", "cmd/...", "plugins/..."},
	},
	{
		Why:  "state gathers the cluster's state over gRPC (GCS and raylets) for the CLI and the dashboard; it imports no server of the runtime",
		From: []string{"state/..."}, Deny: []string{"gcs/...", "raylet/...", "host/...", "autoscaler/...", "dashboard/...", "sdk/...", "cmd/...", "plugins/..."},
	},
	{
		Why:  "sdk/ray starts nodes through host/node and talks to the raylet and the GCS over gRPC; it never imports them",
		From: []string{"sdk/ray/..."}, Deny: []string{"raylet/...", "gcs/...", "host"},
	},
	{
		Why:  "a program embedding a node links what it runs: host/node and sdk/ray never import the head's services (the dashboard, the job API, the autoscaler, state), which the command passes to the node (node.HeadService)",
		From: []string{"host/node/...", "sdk/ray/..."},
		Deny: []string{"autoscaler/...", "dashboard/...", "state/...", "host/dashsvc/...", "host/autoscalersvc/..."},
		// What a program writes for the autoscaler (ray.RequestResources).
		Allow: []string{"autoscaler/request"},
	},
	{
		Why:  "the GCS and the raylet talk over gRPC only; neither imports the other, the hosts or the application API",
		From: []string{"gcs/..."}, Deny: []string{"raylet/...", "host/...", "sdk/ray/...", "cmd/...", "plugins/..."},
		Tests: true,
	},
	{
		Why:  "the raylet does not import the GCS, the hosts or the application API",
		From: []string{"raylet/..."}, Deny: []string{"gcs/...", "host/...", "sdk/ray/...", "cmd/..."},
	},
	{
		Why:  "the plugin host launches plugins; it does not import the runtime it serves",
		From: []string{"host"}, Deny: []string{"raylet/...", "gcs/...", "sdk/ray/...", "cmd/...", "plugins/..."},
	},
	{
		Why:  "internal/ holds the shared libraries at the bottom; they import nothing above them",
		From: []string{"internal/...", "config/..."},
		Deny: []string{"gcs/...", "raylet/...", "host/...", "dashboard/...", "sdk/...", "cmd/...", "plugins/...", "examples/...", "acceptance/..."},
		// The segment helpers are a leaf library the plugin SDK exports; the
		// plugin kinds, the size parser and the HCL type names are the plugin
		// SDK's, which config validates node files with.
		Allow: []string{"sdk/transport/shmem", "sdk/plugin", "sdk/plugin/hclspec"},
		// The test GCS serves the real GCS server; only tests import it
		// (the test server rule below).
		Except: []string{"internal/testservers/gcstest"},
	},
	{
		Why:  "test servers are for tests and the benchmark app, not for the product",
		From: []string{"..."}, Except: []string{"internal/testservers/...", "cmd/..."},
		Deny: []string{"internal/testservers/..."},
	},
	{
		Why:  "apps, examples and acceptance tests are leaves: nothing imports them",
		From: []string{"..."}, Deny: []string{"cmd/...", "examples/...", "acceptance/..."},
		Allow: []string{"$self/..."},
		Tests: true,
	},
}

// Violation is one import that breaks a rule.
type Violation struct {
	Pkg, Import string
	Test        bool
	Rule        *Rule
}

func (v Violation) String() string {
	where := ""
	if v.Test {
		where = " (in a test)"
	}
	return fmt.Sprintf("%s imports %s%s: %s", v.Pkg, v.Import, where, v.Rule.Why)
}

// Package is one package of the module with its module-relative imports.
type Package struct {
	Path        string   // module relative
	Imports     []string // module relative; others are dropped
	TestImports []string // of _test.go files, module relative
}

// Check returns every import of pkgs that breaks rules.
func Check(rules []Rule, pkgs []Package) []Violation {
	var out []Violation
	for _, p := range pkgs {
		for i := range rules {
			r := &rules[i]
			cap1, ok := matchAny(r.From, p.Path)
			if !ok {
				continue
			}
			if _, skip := matchAny(r.Except, p.Path); skip {
				continue
			}
			check := func(imp string, test bool) {
				if _, deny := matchAny(r.Deny, imp); !deny {
					return
				}
				for _, a := range r.Allow {
					a = strings.ReplaceAll(a, "$1", cap1)
					a = strings.ReplaceAll(a, "$self", topTwo(p.Path))
					if match(a, imp) {
						return
					}
				}
				out = append(out, Violation{Pkg: p.Path, Import: imp, Test: test, Rule: r})
			}
			for _, imp := range p.Imports {
				check(imp, false)
			}
			if r.Tests {
				for _, imp := range p.TestImports {
					check(imp, true)
				}
			}
		}
	}
	return out
}

// matchAny reports whether path matches one of patterns and, for a
// "prefix/..." pattern, the first path element below the prefix.
func matchAny(patterns []string, path string) (string, bool) {
	for _, pat := range patterns {
		if match(pat, path) {
			prefix := strings.TrimSuffix(strings.TrimSuffix(pat, "..."), "/")
			rest := strings.TrimPrefix(strings.TrimPrefix(path, prefix), "/")
			first, _, _ := strings.Cut(rest, "/")
			return first, true
		}
	}
	return "", false
}

// match reports whether path matches pattern ("a/b", "a/b/..." or "...").
func match(pattern, path string) bool {
	if pattern == "..." {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	return path == pattern
}

// topTwo is the first two elements of path ("cmd/goray/x" -> "cmd/goray"),
// the unit within which apps and examples may import themselves.
func topTwo(path string) string {
	parts := strings.SplitN(path, "/", 3)
	if len(parts) < 2 {
		return path
	}
	return parts[0] + "/" + parts[1]
}
