package main

// The job of the actor task retry acceptance test
// (acceptance/taskretry_test.go):
//
//	testjob taskretry DIR   two restartable journal actors, "journal-retry"
//	                        (MaxTaskRetries(3)) and "journal-twin" (none
//	                        but call 0's MaxCallRetries(1)),
//	                        each with calls 0..4 under way and 5..9 queued
//	                        behind an argument that is ready once DIR/open
//	                        exists; the test kills -9 both workers (their
//	                        pids in DIR/<name>.pid) and creates DIR/open
//	                        once they are back. A third actor, killed
//	                        with ray.Kill, fails its pending call at once.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Journal is an actor whose state is the sequence numbers of the calls it
// ran, in the order it ran them.
type Journal struct {
	name, dir string
	seen      []int
}

// JournalEntry is what Append returns: who ran the call, as which
// attempt, and the journal after it.
type JournalEntry struct {
	Pid     int
	Attempt int
	Seen    []int
}

// NewJournal is Journal's constructor.
func NewJournal(ctx context.Context, name, dir string) (*Journal, error) {
	return &Journal{name: name, dir: dir}, nil
}

// Append records seq (gate is an argument that is only waited for). The
// first attempt of call 0 writes the worker's pid to DIR/<name>.pid and
// blocks until the worker is killed.
func (j *Journal) Append(ctx context.Context, seq, gate int) (JournalEntry, error) {
	tc, ok := ray.CurrentTask(ctx)
	if !ok {
		return JournalEntry{}, errors.New("no task context")
	}
	if seq == 0 && tc.Attempt == 0 {
		if err := writeFile(filepath.Join(j.dir, j.name+".pid"), strconv.Itoa(os.Getpid())); err != nil {
			return JournalEntry{}, err
		}
		select {
		case <-ctx.Done():
			return JournalEntry{}, ctx.Err()
		case <-time.After(45 * time.Second):
			return JournalEntry{}, fmt.Errorf("%s: call 0 (pid %d) was not killed", j.name, os.Getpid())
		}
	}
	j.seen = append(j.seen, seq)
	return JournalEntry{Pid: os.Getpid(), Attempt: tc.Attempt, Seen: slices.Clone(j.seen)}, nil
}

var (
	// JournalActor is the journal actor class.
	JournalActor = ray.Actor2(NewJournal)
	// JournalAppend records a sequence number.
	JournalAppend = ray.Method2((*Journal).Append)
)

// journalCalls is how many calls each journal gets: the first half under
// way when its worker is killed, the second queued.
const journalCalls = 10

// runTaskRetry is the taskretry job (see the top of this file).
func runTaskRetry(ctx context.Context, dir string) error {
	gate := WaitForFile.Remote(ctx, ray.V(filepath.Join(dir, "open")))
	type journal struct {
		name string
		h    ray.ActorHandle[Journal]
		refs []ray.Ref[JournalEntry]
	}
	js := []*journal{{name: "journal-retry"}, {name: "journal-twin"}}
	for _, j := range js {
		opts := []ray.Option{ray.Name(j.name), ray.MaxRestarts(1)}
		if j.name == "journal-retry" {
			opts = append(opts, ray.MaxTaskRetries(3))
		}
		j.h = JournalActor.Options(opts...).Remote(ctx, ray.V(j.name), ray.V(dir))
		if err := j.h.Ready(ctx); err != nil {
			return fmt.Errorf("%s: %w", j.name, err)
		}
	}
	for _, j := range js {
		for seq := range journalCalls {
			var g ray.Arg[int] = ray.V(0)
			if seq >= journalCalls/2 {
				g = gate // queued until DIR/open exists
			}
			m := JournalAppend.On(j.h)
			if seq == 0 && j.name == "journal-twin" {
				m = m.Options(ray.MaxCallRetries(1)) // this call's own budget
			}
			j.refs = append(j.refs, m.Remote(ctx, ray.V(seq), g))
		}
	}
	// The killed pids, to check the calls ran elsewhere.
	killed := map[string]int{}
	for _, j := range js {
		path := filepath.Join(dir, j.name+".pid")
		if err := pollFile(ctx, path); err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if killed[j.name], err = strconv.Atoi(string(b)); err != nil {
			return err
		}
	}

	retry, twin := js[0], js[1]
	var order []int
	newPid := 0
	for seq, ref := range retry.refs {
		e, err := ref.Get(ctx)
		if err != nil {
			return fmt.Errorf("journal-retry call %d: %w", seq, err)
		}
		if want := seq < journalCalls/2; (e.Attempt == 1) != want || e.Attempt > 1 {
			return fmt.Errorf("journal-retry call %d ran as attempt %d; want attempt 1 for the calls under way, 0 for the queued", seq, e.Attempt)
		}
		if e.Pid == killed[retry.name] || newPid != 0 && e.Pid != newPid {
			return fmt.Errorf("journal-retry call %d ran in pid %d (killed pid %d, restarted pid %d)", seq, e.Pid, killed[retry.name], newPid)
		}
		newPid = e.Pid
		order = e.Seen
		if want := seqs(0, seq); !slices.Equal(e.Seen, want) {
			return fmt.Errorf("journal-retry call %d saw %v; want %v", seq, e.Seen, want)
		}
	}
	fmt.Printf("journal-retry: all %d calls completed on the restarted instance (pid %d != killed %d), in order: %v\n", journalCalls, newPid, killed[retry.name], order)
	fmt.Println("journal-retry: the calls under way ran again as attempt 1: ok")

	for seq, ref := range twin.refs {
		e, err := ref.Get(ctx)
		if seq == 0 {
			if err != nil || e.Attempt != 1 || !slices.Equal(e.Seen, []int{0}) || e.Pid == killed[twin.name] {
				return fmt.Errorf("journal-twin call 0 (MaxCallRetries(1)): %+v, %v; want it retried first on the new instance", e, err)
			}
			continue
		}
		if seq < journalCalls/2 {
			var ue *ray.ActorUnavailableError
			if !errors.Is(err, ray.ErrActorUnavailable) || !errors.As(err, &ue) {
				return fmt.Errorf("journal-twin call %d under way at the kill: %v, %v; want ErrActorUnavailable", seq, e, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("journal-twin call %d: %w", seq, err)
		}
		if want := append([]int{0}, seqs(journalCalls/2, seq)...); !slices.Equal(e.Seen, want) || e.Pid == killed[twin.name] || e.Attempt != 0 {
			return fmt.Errorf("journal-twin call %d: %+v; want %v seen on a new instance", seq, e, want)
		}
	}
	fmt.Println("journal-twin: call 0, with MaxCallRetries(1), ran again first on the restarted instance: ok")
	fmt.Printf("journal-twin: the other %d calls under way failed with ErrActorUnavailable, the %d queued ran on the restarted instance: ok\n", journalCalls/2-1, journalCalls/2)

	return killedActorNotRetried(ctx, dir)
}

// killedActorNotRetried: a call under way on an actor with retries left
// fails at once with ErrActorDied when the actor is killed.
func killedActorNotRetried(ctx context.Context, dir string) error {
	h := JournalActor.Options(ray.MaxRestarts(-1), ray.MaxTaskRetries(-1)).Remote(ctx, ray.V("journal-killed"), ray.V(dir))
	ref := JournalAppend.On(h).Remote(ctx, ray.V(0), ray.V(0))
	if err := pollFile(ctx, filepath.Join(dir, "journal-killed.pid")); err != nil {
		return err
	}
	if err := h.Kill(ctx); err != nil {
		return err
	}
	if e, err := ref.Get(ctx); !errors.Is(err, ray.ErrActorDied) {
		return fmt.Errorf("call under way on a killed actor: %+v, %v; want ErrActorDied", e, err)
	}
	fmt.Println("journal-killed: the call under way failed with ErrActorDied, not retried: ok")
	return nil
}

// seqs returns from..to.
func seqs(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}
