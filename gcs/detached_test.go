package gcs

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// inNamespace returns a named actor of job in namespace ns.
func inNamespace(id, job ids.ID, ns, name string) *gorayv1.ActorInfo {
	a := actorOn(id, job, ids.Nil, ids.Nil, name)
	a.Namespace = ns
	return a
}

// addJob adds a running job.
func addJob(t *testing.T, c gorayv1.GcsClient, job ids.ID) {
	t.Helper()
	_, err := c.AddJob(ctxT(t), &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: job.Bytes(), BinaryPath: "/bin/app", BinarySha256: testSHA}})
	mustOK(t, err)
}

// TestActorNamespaces: a name is unique per namespace, looked up in one.
func TestActorNamespaces(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	job := newID()
	inA, inB, inDefault := newID(), newID(), newID()
	registerActor(t, c, inNamespace(inA, job, "a", "counter"))
	registerActor(t, c, inNamespace(inB, job, "b", "counter"))
	registerActor(t, c, inNamespace(inDefault, job, "", "counter"))

	_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: inNamespace(newID(), job, "a", "counter")})
	wantCode(t, err, codes.AlreadyExists, fmt.Sprintf(`actor name "counter" in namespace "a" is already taken by actor %s`, inA))

	for _, tc := range []struct {
		ns   string
		want ids.ID
	}{{"a", inA}, {"b", inB}, {"", inDefault}} {
		r, err := c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "counter", Namespace: tc.ns})
		mustOK(t, err)
		if got := ids.MustFromBytes(r.GetActor().GetActorId()); got != tc.want || r.GetActor().GetNamespace() != tc.ns {
			t.Errorf("GetActor(counter in %q) = %s in %q, want %s", tc.ns, got.Short(), r.GetActor().GetNamespace(), tc.want.Short())
		}
	}
	_, err = c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "counter", Namespace: "c"})
	wantCode(t, err, codes.NotFound, `no actor named "counter" in namespace "c"`)

	// A death frees the name in its namespace only.
	setState(t, c, inA, dead, "killed")
	_, err = c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "counter", Namespace: "a"})
	wantCode(t, err, codes.NotFound, `in namespace "a"`)
	if _, err := c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "counter", Namespace: "b"}); err != nil {
		t.Fatalf("the death in namespace a freed the name in b: %v", err)
	}
	registerActor(t, c, inNamespace(newID(), job, "a", "counter"))

	for _, tc := range []struct {
		name, ns, want string
	}{
		{"control character", "a\x00b", "holds a control character"},
		{"too long", strings.Repeat("n", limits.MaxActorNamespaceLen+1), fmt.Sprintf("more than the %d allowed", limits.MaxActorNamespaceLen)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: inNamespace(newID(), job, tc.ns, "x")})
			wantCode(t, err, codes.InvalidArgument, "invalid actor.namespace: ")
			wantCode(t, err, codes.InvalidArgument, tc.want)
			_, err = c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "x", Namespace: tc.ns})
			wantCode(t, err, codes.InvalidArgument, "invalid namespace: ")
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
}

// TestGetIfExists: concurrent get-if-exists creations of one name all get
// the one actor the GCS registered; another class holding the name is an
// error naming both.
func TestGetIfExists(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	job := newID()
	const creators = 16
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		registered []ids.ID
		got        = map[ids.ID]int{}
	)
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := newID()
			rep, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: inNamespace(id, job, "ns", "singleton"), GetIfExists: true})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if rep.GetExisting() == nil {
				registered = append(registered, id)
				got[id]++
				return
			}
			got[ids.MustFromBytes(rep.GetExisting().GetActorId())]++
		}()
	}
	wg.Wait()
	if len(registered) != 1 || len(got) != 1 || got[registered[0]] != creators {
		t.Fatalf("%d concurrent get-if-exists creations: registered %v, got actors %v; want one actor for all", creators, registered, got)
	}
	list, err := c.ListActors(ctx, &gorayv1.ListActorsRequest{})
	mustOK(t, err)
	if len(list.GetActors()) != 1 {
		t.Fatalf("ListActors = %d actors, want 1", len(list.GetActors()))
	}

	other := inNamespace(newID(), job, "ns", "singleton")
	other.ClassName = "Store"
	_, err = c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: other, GetIfExists: true})
	wantCode(t, err, codes.AlreadyExists, fmt.Sprintf(`actor name "singleton" in namespace "ns" is already taken by actor %s of class Counter, not Store`, registered[0]))

	// Once the holder is dead, get-if-exists registers a new one.
	setState(t, c, registered[0], dead, "killed")
	fresh := newID()
	rep, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: inNamespace(fresh, job, "ns", "singleton"), GetIfExists: true})
	mustOK(t, err)
	if rep.GetExisting() != nil {
		t.Fatalf("get-if-exists after the holder died returned %v, want a new registration", rep.GetExisting())
	}
}

// TestDetachedSurvivesJobEnd: a detached actor is GCS-owned, outlives its
// job and its owner's node, is found by name afterwards, restarts only
// while its job runs and ends when killed.
func TestDetachedSurvivesJobEnd(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	creatorNode, actorNode := newID(), newID()
	registerNode(t, c, creatorNode, "n0")
	registerNode(t, c, actorNode, "n1")
	job := newID()
	addJob(t, c, job)
	creator := &gorayv1.Address{NodeId: creatorNode.Bytes(), WorkerId: newID().Bytes()}

	unnamed := actorOn(newID(), job, ids.Nil, ids.Nil, "")
	unnamed.Detached = true
	_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: unnamed})
	wantCode(t, err, codes.InvalidArgument, "a detached actor must be named")

	detached, restartable, notYet, owned := newID(), newID(), newID(), newID()
	for _, a := range []struct {
		id       ids.ID
		name     string
		detached bool
		alive    bool
	}{{detached, "keeper", true, true}, {restartable, "phoenix", true, true}, {notYet, "late", true, false}, {owned, "owned", false, true}} {
		info := actorOn(a.id, job, actorNode, newID(), a.name)
		info.Namespace, info.Detached, info.Owner, info.MaxRestarts = "ns", a.detached, creator, -1
		registerActor(t, c, info)
		if a.alive {
			setState(t, c, a.id, alive, "")
		}
	}
	if o := getActor(t, c, detached).GetOwner(); o != nil {
		t.Fatalf("detached actor recorded with owner %v, want none (the GCS)", o)
	}

	// While its job runs, a detached actor restarts like any other.
	_, err = c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{WorkerId: getActor(t, c, restartable).GetAddress().GetWorkerId(), Reason: "crash"})
	mustOK(t, err)
	if st := getActor(t, c, restartable).GetState(); st != gorayv1.ActorState_ACTOR_STATE_RESTARTING {
		t.Fatalf("detached actor with restarts left, job running: state %v after a crash, want RESTARTING", st)
	}

	_, err = c.MarkJobFinished(ctx, &gorayv1.MarkJobFinishedRequest{JobId: job.Bytes()})
	mustOK(t, err)
	// The creator's node dying does not matter either.
	_, err = c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: creatorNode.Bytes(), Reason: "stopped"})
	mustOK(t, err)

	for _, tc := range []struct {
		id     ids.ID
		want   gorayv1.ActorState
		reason string
	}{
		{detached, alive, ""},
		{owned, dead, "job finished"},
		{restartable, dead, "before the detached actor was created"},
		{notYet, dead, "before the detached actor was created"},
	} {
		a := getActor(t, c, tc.id)
		if a.GetState() != tc.want || !strings.Contains(a.GetDeathReason(), tc.reason) {
			t.Errorf("actor %q after its job ended: %v (%q), want %v (%q)", a.GetName(), a.GetState(), a.GetDeathReason(), tc.want, tc.reason)
		}
	}
	r, err := c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "keeper", Namespace: "ns"})
	mustOK(t, err)
	if ids.MustFromBytes(r.GetActor().GetActorId()) != detached {
		t.Fatalf("GetActor(keeper in ns) = %v", r.GetActor())
	}

	// Nobody is left to create it again: a failure now is its end.
	_, err = c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{WorkerId: r.GetActor().GetAddress().GetWorkerId(), Reason: "crash"})
	mustOK(t, err)
	a := getActor(t, c, detached)
	if a.GetState() != dead || !strings.Contains(a.GetDeathReason(), "crash (a detached actor is created again by the job that created it, and job") {
		t.Fatalf("detached actor after a crash, its job finished: %v (%q), want DEAD saying why", a.GetState(), a.GetDeathReason())
	}
	_, err = c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "keeper", Namespace: "ns"})
	wantCode(t, err, codes.NotFound, "keeper")
}

// TestRestoreKeepsNamespaceAndLifetime: a GCS opened again on the same
// storage keeps each actor's namespace and lifetime, and its names per
// namespace.
func TestRestoreKeepsNamespaceAndLifetime(t *testing.T) {
	for _, sc := range storages {
		t.Run(sc.name, func(t *testing.T) {
			if sc.name == "bolt" {
				leaktest.Goroutines(t)
			}
			st, _ := sc.make(t)
			s1, err := Open(ctxT(t), Options{Storage: st})
			mustOK(t, err)
			c1, stop1 := serveOpened(t, s1)
			job := newID()
			addJob(t, c1, job)
			keeper, other := newID(), newID()
			a := inNamespace(keeper, job, "prod", "keeper")
			a.Detached = true
			registerActor(t, c1, a)
			setState(t, c1, keeper, alive, "")
			registerActor(t, c1, inNamespace(other, job, "dev", "keeper"))
			_, err = c1.MarkJobFinished(ctxT(t), &gorayv1.MarkJobFinishedRequest{JobId: job.Bytes()})
			mustOK(t, err)
			stop1()

			s2, err := Open(ctxT(t), Options{Storage: st})
			mustOK(t, err)
			c2, _ := serveOpened(t, s2)
			r, err := c2.GetActor(ctxT(t), &gorayv1.GetActorRequest{Name: "keeper", Namespace: "prod"})
			mustOK(t, err)
			got := r.GetActor()
			if ids.MustFromBytes(got.GetActorId()) != keeper || got.GetNamespace() != "prod" || !got.GetDetached() || got.GetState() != alive {
				t.Fatalf("restored keeper in prod = %v, want the ALIVE detached actor %s", got, keeper.Short())
			}
			// dev's keeper died with its job and freed its name.
			_, err = c2.GetActor(ctxT(t), &gorayv1.GetActorRequest{Name: "keeper", Namespace: "dev"})
			wantCode(t, err, codes.NotFound, `in namespace "dev"`)
			_, err = c2.RegisterActor(ctxT(t), &gorayv1.RegisterActorRequest{Actor: inNamespace(newID(), newID(), "prod", "keeper")})
			wantCode(t, err, codes.AlreadyExists, `"keeper" in namespace "prod"`)
		})
	}
}
