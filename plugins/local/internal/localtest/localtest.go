// Package localtest is what the local provider's tests share beyond
// sdk/provider/providertest/headtest (the head, the stand-in goray that
// fails, the leak checks): a stand-in goray that starts like a node and
// keeps running.
package localtest

import (
	"testing"

	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// SleepingGoray is a stand-in goray that writes the ready file (the value
// of --ready-file) and waits until it is killed; with ignoreTerm it
// ignores SIGTERM (a node that hangs while stopping). Its command line
// keeps goray's arguments, so the provider recognises it.
func SleepingGoray(t testing.TB, dir string, ignoreTerm bool) string {
	t.Helper()
	trap := "trap 'exit 0' TERM"
	if ignoreTerm {
		trap = "trap '' TERM"
	}
	return headtest.WriteScript(t, dir, "sleeping-goray", trap+`
ready=
while [ $# -gt 0 ]; do
  if [ "$1" = --ready-file ]; then ready=$2; fi
  shift
done
[ -n "$ready" ] && echo '{}' > "$ready"
while :; do sleep 0.05; done
`)
}
