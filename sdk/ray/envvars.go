package ray

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// MaxEnvVarsBytes bounds the variables EnvVars sets, names and values
// together: they travel with the job to every node (in the GCS).
const MaxEnvVarsBytes = 64 << 10

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

// envVarList checks EnvVars' variables and returns them as NAME=value,
// sorted by name.
func envVarList(vars map[string]string) ([]string, error) {
	total := 0
	out := make([]string, 0, len(vars))
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		val := vars[name]
		switch {
		case name == "" || strings.ContainsAny(name, "=\x00"):
			return nil, fmt.Errorf("goray: EnvVars: %q is not a variable name (empty, or holds = or NUL)", name)
		case strings.HasPrefix(name, "GORAY_"):
			return nil, fmt.Errorf("goray: EnvVars: %s: GORAY_ variables are the runtime's own; use the option that sets it", name)
		case strings.ContainsRune(val, 0):
			return nil, fmt.Errorf("goray: EnvVars: the value of %s holds a NUL byte", name)
		}
		total += len(name) + 1 + len(val)
		if total > MaxEnvVarsBytes {
			return nil, fmt.Errorf("goray: EnvVars: the variables take more than %d bytes (at %s); ship larger data as an object (Put) or a file", MaxEnvVarsBytes, name)
		}
		out = append(out, name+"="+val)
	}
	return out, nil
}
