package ray

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/goray-dev/goray/internal/workerenv"
)

// MaxEnvVarsBytes bounds the variables EnvVars sets, names and values
// together: they travel with the job to every node (in the GCS).
const MaxEnvVarsBytes = workerenv.MaxVarsBytes

// EnvVars sets environment variables of the job's workers, on every node,
// as Ray's runtime_env={"env_vars": {...}} does for a job: each worker
// gets its node's environment, the variables ForwardEnv forwards, then
// these, which win over both. Options add up (a later value of a name
// wins). Names are not empty and hold no "=" or NUL, values no NUL; GORAY_
// variables are the runtime's own and are refused, and the variables
// together are at most MaxEnvVarsBytes. Like forwarded variables they are
// stored in the GCS with the job, for raylets of other nodes, and never
// shown by listings.
func EnvVars(vars map[string]string) InitOption {
	return func(o *initOptions) {
		if o.envVars == nil {
			o.envVars = map[string]string{}
		}
		maps.Copy(o.envVars, vars)
	}
}

// envVarList checks the variables of an option (what names it, for
// errors: "EnvVars", or "F: WorkerEnv") and returns them as NAME=value,
// sorted by name.
func envVarList(what string, vars map[string]string) ([]string, error) {
	total := 0
	out := make([]string, 0, len(vars))
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		val := vars[name]
		switch {
		case name == "" || strings.ContainsAny(name, "=\x00"):
			return nil, fmt.Errorf("goray: %s: %q is not a variable name (empty, or holds = or NUL)", what, name)
		case strings.HasPrefix(name, "GORAY_"):
			return nil, fmt.Errorf("goray: %s: %s: GORAY_ variables are the runtime's own; use the option that sets it", what, name)
		case strings.ContainsRune(val, 0):
			return nil, fmt.Errorf("goray: %s: the value of %s holds a NUL byte", what, name)
		}
		total += len(name) + 1 + len(val)
		if total > MaxEnvVarsBytes {
			return nil, fmt.Errorf("goray: %s: the variables take more than %d bytes (at %s); ship larger data as an object (Put) or a file", what, MaxEnvVarsBytes, name)
		}
		out = append(out, name+"="+val)
	}
	return out, nil
}

// WorkerEnv sets environment variables of the worker that runs a task or
// hosts an actor, as Ray's runtime_env={"env_vars": {...}} in a task's or
// actor's options: they come after the job's (ForwardEnv, EnvVars) and win
// over them. A worker started with them runs only calls asking for exactly
// the same variables (the raylet pools workers per job and set), so a set
// used once costs a worker start. What such a task or actor submits
// inherits its variables, merged with its own WorkerEnv (whose values
// win), as in Ray. Names and values obey the rules of EnvVars; options add
// up, a later value of a name winning.
func WorkerEnv(vars map[string]string) Option {
	return func(c *callOptions) {
		if c.workerEnv == nil {
			c.workerEnv = map[string]string{}
		}
		maps.Copy(c.workerEnv, vars)
	}
}

// callEnvVars returns a call's variables (name is the function or class,
// for errors): those this worker inherited from its own lease, with the
// call's WorkerEnv over them, as NAME=value sorted by name.
func callEnvVars(name string, inherited, set map[string]string) ([]string, error) {
	if len(inherited) == 0 && len(set) == 0 {
		return nil, nil
	}
	all := maps.Clone(inherited)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, set)
	return envVarList(name+": WorkerEnv", all)
}

// inheritedEnv is what a worker started for a task's or actor's variables
// passes on to what it submits: those $GORAY_LEASE_ENV names, with their
// values in this process.
var inheritedEnv = sync.OnceValue(func() map[string]string {
	names := os.Getenv(workerenv.LeaseEnv)
	if names == "" {
		return nil
	}
	out := map[string]string{}
	for n := range strings.SplitSeq(names, ",") {
		if v, ok := os.LookupEnv(n); ok {
			out[n] = v
		}
	}
	return out
})
