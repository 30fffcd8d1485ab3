package workerenv

import (
	"strings"
	"testing"
)

func TestCheckVars(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars []string
		want string // "" when valid, else words of the error
	}{
		{"none", nil, ""},
		{"sorted", []string{"A=1", "B=", "C=x=y"}, ""},
		{"no =", []string{"A"}, `env_vars[0]: "A" is not NAME=value`},
		{"empty name", []string{"=x"}, "is not NAME=value"},
		{"NUL in a name", []string{"A\x00B=1"}, "is not NAME=value"},
		{"NUL in a value", []string{"A=x\x00"}, "the value of A holds a NUL byte"},
		{"runtime's own", []string{"GORAY_WORKER=1"}, "GORAY_WORKER: GORAY_ variables are the runtime's own"},
		{"unsorted", []string{"B=1", "A=1"}, "env_vars[1]: A is out of order or repeated"},
		{"repeated", []string{"A=1", "A=2"}, "env_vars[1]: A is out of order or repeated"},
		{"too large", []string{"A=" + strings.Repeat("x", MaxVarsBytes)}, "more than 65536 bytes (at A)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckVars(tc.vars)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckVars(%q) = %v", tc.vars, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckVars = %v; want an error with %q", err, tc.want)
			}
		})
	}
}
