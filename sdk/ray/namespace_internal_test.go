package ray

import (
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestJobNamespaceChoice: the option wins over the environment, which wins over
// an anonymous namespace; bad ones are errors naming where they came
// from; the workers get the namespace in the job's environment.
func TestJobNamespaceChoice(t *testing.T) {
	str := func(s string) *string { return &s }
	jid := ids.New()
	for _, tc := range []struct {
		name    string
		opt     *string
		env     string
		want    string
		wantErr string
	}{
		{"option", str("prod"), "dev", "prod", ""},
		{"environment", nil, "dev", "dev", ""},
		{"anonymous", nil, "", "anonymous-" + jid.String(), ""},
		{"empty option", str(""), "dev", "", `Namespace(""): a namespace is not empty`},
		{"bad option", str("a\nb"), "", "", `goray: Namespace: namespace "a\nb" holds a control character`},
		{"long environment", nil, strings.Repeat("x", MaxNamespaceLen+1), "", "goray: $GORAY_NAMESPACE: namespace 257 bytes, more than the 256 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &pb.JobInfo{JobId: jid.Bytes()}
			ns, err := jobNamespace(job, tc.opt, tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("jobNamespace: %q, %v; want an error containing %q", ns, err, tc.wantErr)
				}
				return
			}
			if err != nil || ns != tc.want {
				t.Fatalf("jobNamespace = %q, %v; want %q", ns, err, tc.want)
			}
			if got := job.GetEnv(); len(got) != 1 || got[0] != EnvNamespace+"="+tc.want {
				t.Fatalf("job env %q, want the namespace forwarded", got)
			}
		})
	}
}
