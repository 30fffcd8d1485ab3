package ray

import (
	"strings"
	"testing"
)

func TestEnvVarList(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want string // the list joined by ";", or the error's words
		bad  bool
	}{
		{"none", nil, "", false},
		{"sorted by name", map[string]string{"B": "2", "A": "1", "EMPTY": ""}, "A=1;B=2;EMPTY=", false},
		{"a value with =", map[string]string{"URL": "a=b"}, "URL=a=b", false},
		{"empty name", map[string]string{"": "x"}, `"" is not a variable name`, true},
		{"= in a name", map[string]string{"A=B": "x"}, `"A=B" is not a variable name`, true},
		{"NUL in a value", map[string]string{"A": "x\x00y"}, "the value of A holds a NUL byte", true},
		{"the runtime's own", map[string]string{"GORAY_ADDRESS": "x"}, "GORAY_ADDRESS: GORAY_ variables are the runtime's own", true},
		{"too large", map[string]string{"BIG": strings.Repeat("x", MaxEnvVarsBytes)}, "more than 65536 bytes (at BIG)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envVarList("EnvVars", tc.vars)
			if tc.bad {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("envVarList = %v, %v; want an error saying %q", got, err, tc.want)
				}
				return
			}
			if err != nil || strings.Join(got, ";") != tc.want {
				t.Fatalf("envVarList = %q, %v; want %q", strings.Join(got, ";"), err, tc.want)
			}
		})
	}
	// Options add up; a later value of a name wins.
	var o initOptions
	EnvVars(map[string]string{"A": "1", "B": "1"})(&o)
	EnvVars(map[string]string{"B": "2"})(&o)
	if got, _ := envVarList("EnvVars", o.envVars); strings.Join(got, ";") != "A=1;B=2" {
		t.Fatalf("two EnvVars options: %q", got)
	}
}

func TestCallEnvVars(t *testing.T) {
	for _, tc := range []struct {
		name           string
		inherited, set map[string]string
		want           string
	}{
		{"none", nil, nil, ""},
		{"the call's", nil, map[string]string{"B": "2", "A": "1"}, "A=1;B=2"},
		{"inherited", map[string]string{"P": "parent"}, nil, "P=parent"},
		{"the call's win", map[string]string{"P": "parent", "Q": "q"}, map[string]string{"P": "child"}, "P=child;Q=q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := callEnvVars("main.f", tc.inherited, tc.set)
			if err != nil || strings.Join(got, ";") != tc.want {
				t.Fatalf("callEnvVars = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	_, err := callEnvVars("main.f", nil, map[string]string{"GORAY_X": "1"})
	if err == nil || !strings.Contains(err.Error(), "goray: main.f: WorkerEnv: GORAY_X: GORAY_ variables are the runtime's own") {
		t.Errorf("callEnvVars with a GORAY_ name: %v", err)
	}
	// Options add up; a later value of a name wins, and Options copies.
	base := newCallOptions([]Option{WorkerEnv(map[string]string{"A": "1", "B": "1"})})
	more := base.with([]Option{WorkerEnv(map[string]string{"B": "2"})})
	if base.workerEnv["B"] != "1" || more.workerEnv["A"] != "1" || more.workerEnv["B"] != "2" {
		t.Errorf("WorkerEnv options: base %v, extended %v", base.workerEnv, more.workerEnv)
	}
}
