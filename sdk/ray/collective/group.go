package collective

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
	"github.com/goray-dev/goray/sdk/transport"
)

// KVNamespace is the namespace of the cluster KV where group declarations
// and rank records live (keys start with the job id).
const KVNamespace = "collective"

// MaxNameLen is the longest group name accepted.
const MaxNameLen = 128

// Errors. The collective errors of the backend keep their identity: the
// variables below are the transport package's, so errors.Is works with
// either name.
var (
	// ErrRankFailed: another member failed (died, timed out, left, passed
	// arguments that differ); the group is broken until re-created.
	ErrRankFailed = transport.ErrRankFailed
	// ErrTimeout: the call's deadline passed (the ctx's, the group's
	// Timeout or the plugin's configured timeout).
	ErrTimeout = transport.ErrTimeout
	// ErrGroupNotFound: no such group is declared in this job (never
	// created, or destroyed), or the backend no longer hosts this member.
	ErrGroupNotFound = transport.ErrGroupNotFound
	// ErrGroupExists: CreateGroup named a group that is already declared.
	ErrGroupExists = transport.ErrGroupExists
	// ErrBadArgument: invalid arguments (group name, members, tensors,
	// root, reduction); it is transport.ErrBadMetadata.
	ErrBadArgument = transport.ErrBadMetadata
	// ErrNotMember: the call does not run inside an actor method of one of
	// the group's members (pass the method's ctx).
	ErrNotMember = errors.New("not a member of the collective group")
)

// Actor is an actor handle: any ray.ActorHandle[T].
type Actor interface {
	// ID returns the actor's id (hex).
	ID() string
}

// Members converts actor handles of one class into a member list, in rank
// order.
func Members[T any](actors ...ray.ActorHandle[T]) []Actor {
	out := make([]Actor, len(actors))
	for i, a := range actors {
		out[i] = a
	}
	return out
}

// GroupOption configures CreateGroup.
type GroupOption func(*declaration)

// Timeout bounds every collective call of the group's members (and the
// rendezvous of their first call) to d. Zero, the default, leaves the
// bound to the caller's ctx and the plugin's configured timeout (30 s for
// goray's "collective" plugin). A member that dies outside a call is
// noticed by the others when their call runs out of this time.
func Timeout(d time.Duration) GroupOption {
	return func(dl *declaration) { dl.TimeoutMs = d.Milliseconds() }
}

// Group is a declared group.
type Group struct {
	// Name is the group's name.
	Name string
	// Backend is the transport plugin running the collectives.
	Backend string
	// Members are the members' actor ids, in rank order.
	Members []string
	// Timeout is the Timeout option (0: not set).
	Timeout time.Duration
	// Incarnation identifies this declaration: a group destroyed and
	// created again under the same name has a new one.
	Incarnation string
}

// WorldSize returns the number of members.
func (g *Group) WorldSize() int { return len(g.Members) }

// Rank returns the rank of actor id, or -1 when it is not a member.
func (g *Group) Rank(actorID string) int { return slices.Index(g.Members, actorID) }

// declaration is the KV record of a group.
type declaration struct {
	V           int      `json:"v"`
	Name        string   `json:"name"`
	Backend     string   `json:"backend"`
	Members     []string `json:"members"`
	TimeoutMs   int64    `json:"timeout_ms,omitempty"`
	Incarnation string   `json:"incarnation"`
}

const declVersion = 1

func (d *declaration) group() *Group {
	return &Group{Name: d.Name, Backend: d.Backend, Members: slices.Clone(d.Members),
		Timeout: time.Duration(d.TimeoutMs) * time.Millisecond, Incarnation: d.Incarnation}
}

func (d *declaration) timeout() time.Duration { return time.Duration(d.TimeoutMs) * time.Millisecond }

// rankRecord says where a member joined its backend, so that DestroyGroup
// from any process can release the member in its node's plugin.
type rankRecord struct {
	Node    string `json:"node"`
	Actor   string `json:"actor"`
	Backend string `json:"backend"`
	Group   string `json:"group"` // the backend's group name
	Rank    int    `json:"rank"`
}

// validName checks a group name: 1 to MaxNameLen letters, digits, '.', '_'
// or '-'.
func validName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: group name %.40q: want 1 to %d characters", ErrBadArgument, name, MaxNameLen)
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%w: group name %.40q: only letters, digits, '.', '_' and '-' are allowed", ErrBadArgument, name)
		}
	}
	return nil
}

// runtime returns the process's core worker and its GCS.
func runtime() (*core.CoreWorker, error) {
	cw := core.Current()
	if cw == nil {
		return nil, ray.ErrNotInitialized
	}
	if cw.GCS() == nil {
		return nil, fmt.Errorf("goray collective: this process has no GCS connection")
	}
	return cw, nil
}

func declKey(cw *core.CoreWorker, name string) string {
	return cw.JobID().String() + "/group/" + name
}

func rankPrefix(cw *core.CoreWorker, name string) string {
	return cw.JobID().String() + "/rank/" + name + "/"
}

func rankKey(cw *core.CoreWorker, name, incarnation string, rank int) string {
	return rankPrefix(cw, name) + incarnation + "/" + strconv.Itoa(rank)
}

// backendGroup is the group name the backend sees: unique per job and
// incarnation, so that a re-created group never meets records or members
// of an earlier one.
func backendGroup(cw *core.CoreWorker, d *declaration) string {
	return cw.JobID().String()[:16] + "~" + d.Name + "~" + d.Incarnation
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateGroup declares a group named name whose members are actors, in
// rank order, running collectives through the transport plugin backend
// (goray's is "collective"; every member's node must run it, so declare
// the actors with ray.Transports(backend)). It records the declaration in
// the cluster KV and returns; members join at their first collective call.
// A name already declared in this job fails with ErrGroupExists; invalid
// names or member lists with ErrBadArgument. Call it from the driver or
// from any task or actor of the job.
func CreateGroup(ctx context.Context, name, backend string, actors []Actor, opts ...GroupOption) (*Group, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if backend == "" {
		return nil, fmt.Errorf("%w: empty backend name", ErrBadArgument)
	}
	if len(actors) == 0 || len(actors) > transport.MaxWorldSize {
		return nil, fmt.Errorf("%w: group %q: %d members (want 1 to %d)", ErrBadArgument, name, len(actors), transport.MaxWorldSize)
	}
	d := &declaration{V: declVersion, Name: name, Backend: backend, Incarnation: randomHex(8)}
	for i, a := range actors {
		if a == nil {
			return nil, fmt.Errorf("%w: group %q: member %d is nil", ErrBadArgument, name, i)
		}
		id := a.ID()
		if _, err := ids.Parse(id); err != nil || id == "" {
			return nil, fmt.Errorf("%w: group %q: member %d has no actor id (%q)", ErrBadArgument, name, i, id)
		}
		if j := slices.Index(d.Members, id); j >= 0 {
			return nil, fmt.Errorf("%w: group %q: actor %s is member %d and %d", ErrBadArgument, name, id, j, i)
		}
		d.Members = append(d.Members, id)
	}
	for _, o := range opts {
		o(d)
	}
	if d.TimeoutMs < 0 {
		return nil, fmt.Errorf("%w: negative timeout", ErrBadArgument)
	}
	cw, err := runtime()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	rep, err := cw.GCS().KVPut(ctx, &pb.KVPutRequest{Ns: KVNamespace, Key: declKey(cw, name), Value: b, Overwrite: false})
	if err != nil {
		return nil, fmt.Errorf("goray collective: declaring group %q: %w", name, err)
	}
	if !rep.GetAdded() {
		return nil, fmt.Errorf("%w: group %q is declared already in this job (destroy it first)", ErrGroupExists, name)
	}
	return d.group(), nil
}

// readDecl returns the group's declaration; a missing one is
// ErrGroupNotFound.
func readDecl(ctx context.Context, cw *core.CoreWorker, name string) (*declaration, error) {
	rep, err := cw.GCS().KVGet(ctx, &pb.KVGetRequest{Ns: KVNamespace, Key: declKey(cw, name)})
	if err != nil {
		return nil, fmt.Errorf("goray collective: reading group %q: %w", name, err)
	}
	if !rep.GetFound() {
		return nil, fmt.Errorf("%w: group %q is not declared in this job (CreateGroup) or was destroyed", ErrGroupNotFound, name)
	}
	var d declaration
	if err := json.Unmarshal(rep.GetValue(), &d); err != nil || d.V != declVersion || d.Name != name || d.Incarnation == "" {
		return nil, fmt.Errorf("%w: group %q has an unreadable declaration (%v)", ErrBadArgument, name, err)
	}
	return &d, nil
}

// GetGroup returns the declaration of group name in this job, or an error
// matching ErrGroupNotFound.
func GetGroup(ctx context.Context, name string) (*Group, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	cw, err := runtime()
	if err != nil {
		return nil, err
	}
	d, err := readDecl(ctx, cw, name)
	if err != nil {
		return nil, err
	}
	return d.group(), nil
}

// Rank returns the rank of the calling actor in group name (ctx must be an
// actor method's); ErrNotMember when it is not a member.
func Rank(ctx context.Context, name string) (int, error) {
	actor, err := selfActor(ctx)
	if err != nil {
		return -1, err
	}
	g, err := GetGroup(ctx, name)
	if err != nil {
		return -1, err
	}
	r := g.Rank(actor)
	if r < 0 {
		return -1, fmt.Errorf("%w: actor %s is not a member of group %q", ErrNotMember, actor, name)
	}
	return r, nil
}

// WorldSize returns the number of members of group name.
func WorldSize(ctx context.Context, name string) (int, error) {
	g, err := GetGroup(ctx, name)
	if err != nil {
		return 0, err
	}
	return g.WorldSize(), nil
}

// selfActor returns the id of the actor whose method ctx belongs to.
func selfActor(ctx context.Context) (string, error) {
	t, ok := core.CurrentTask(ctx)
	if !ok || t.ActorID.IsNil() {
		return "", fmt.Errorf("%w: collective calls run inside actor methods of the group's members (pass the method's ctx)", ErrNotMember)
	}
	return t.ActorID.String(), nil
}

// ------------------------------------------------------------ membership

// member is this process's membership of one group.
type member struct {
	decl   *declaration
	rank   int
	group  string // the backend's group name
	broken error  // set once a call failed: the group is unusable
}

// slot holds a process's membership of one group; mu serializes joining
// and leaving.
type slot struct {
	mu sync.Mutex
	m  *member
}

var registry struct {
	mu    sync.Mutex
	slots map[string]*slot // actor id + "/" + group name
}

func slotFor(actor, name string) *slot {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.slots == nil {
		registry.slots = map[string]*slot{}
	}
	k := actor + "/" + name
	s := registry.slots[k]
	if s == nil {
		s = &slot{}
		registry.slots[k] = s
	}
	return s
}

// brokenError is what calls on a broken membership return.
type brokenError struct {
	group string
	cause error
}

func (e *brokenError) Error() string {
	return fmt.Sprintf("collective group %q is broken by an earlier failure (destroy and create it again): %v", e.group, e.cause)
}

func (e *brokenError) Is(target error) bool { return target == ErrRankFailed }

func (e *brokenError) Unwrap() error { return e.cause }

// join returns the calling actor's membership of group name, joining the
// backend's group when needed (blocking until every member joined). fresh
// reports whether this call joined.
func join(ctx context.Context, cw *core.CoreWorker, actor, name string) (m *member, fresh bool, err error) {
	s := slotFor(actor, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m != nil && s.m.broken == nil {
		return s.m, false, nil
	}
	d, err := readDecl(ctx, cw, name)
	if err != nil {
		return nil, false, err
	}
	if s.m != nil {
		if s.m.decl.Incarnation == d.Incarnation {
			return nil, false, &brokenError{group: name, cause: s.m.broken}
		}
		s.m = nil // re-created: join the new incarnation
	}
	rank := slices.Index(d.Members, actor)
	if rank < 0 {
		return nil, false, fmt.Errorf("%w: actor %s is not a member of group %q", ErrNotMember, actor, name)
	}
	m = &member{decl: d, rank: rank, group: backendGroup(cw, d)}
	rec, _ := json.Marshal(rankRecord{Node: cw.NodeID().String(), Actor: actor, Backend: d.Backend, Group: m.group, Rank: rank})
	if _, err := cw.GCS().KVPut(ctx, &pb.KVPutRequest{Ns: KVNamespace, Key: rankKey(cw, name, d.Incarnation, rank), Value: rec, Overwrite: true}); err != nil {
		return nil, false, fmt.Errorf("goray collective: recording rank %d of group %q: %w", rank, name, err)
	}
	c := cw.Collective(d.Backend, ids.ID{})
	req := &transport.CreateGroupRequest{Group: m.group, Rank: rank, WorldSize: len(d.Members), Members: d.Members, Timeout: d.timeout()}
	jctx, cancel := bound(ctx, d)
	_, err = c.CreateGroup(jctx, req)
	if errors.Is(err, transport.ErrGroupExists) {
		// A member of this incarnation is still hosted (a join this process
		// gave up on): release it and join again.
		_, _ = c.DestroyGroup(jctx, &transport.DestroyGroupRequest{Group: m.group, Rank: rank})
		_, err = c.CreateGroup(jctx, req)
	}
	cancel()
	if err != nil {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = cw.GCS().KVDel(dctx, &pb.KVDelRequest{Ns: KVNamespace, Key: rankKey(cw, name, d.Incarnation, rank)})
		dcancel()
		return nil, false, err
	}
	s.m = m
	return m, true, nil
}

// bound applies the group's timeout to ctx.
func bound(ctx context.Context, d *declaration) (context.Context, context.CancelFunc) {
	if t := d.timeout(); t > 0 {
		return context.WithTimeout(ctx, t)
	}
	return context.WithCancel(ctx)
}

// breakMember records that a call of m failed: the backend broke the
// group, so m's member is released there at once (its connections) and
// later calls fail until the group is re-created.
func breakMember(ctx context.Context, cw *core.CoreWorker, actor, name string, m *member, cause error) {
	s := slotFor(actor, name)
	s.mu.Lock()
	if s.m == m && m.broken == nil {
		m.broken = cause
	}
	s.mu.Unlock()
	release(ctx, cw, name, m)
}

// forget drops m from the registry (the backend no longer hosts it).
func forget(actor, name string, m *member) {
	s := slotFor(actor, name)
	s.mu.Lock()
	if s.m == m {
		s.m = nil
	}
	s.mu.Unlock()
}

// release destroys m's member in this node's backend and deletes its rank
// record, within a few seconds whatever ctx says.
func release(ctx context.Context, cw *core.CoreWorker, name string, m *member) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := cw.Collective(m.decl.Backend, ids.ID{}).DestroyGroup(dctx, &transport.DestroyGroupRequest{Group: m.group, Rank: m.rank})
	if errors.Is(err, transport.ErrGroupNotFound) {
		err = nil
	}
	_, _ = cw.GCS().KVDel(dctx, &pb.KVDelRequest{Ns: KVNamespace, Key: rankKey(cw, name, m.decl.Incarnation, m.rank)})
	return err
}

// DestroyGroup destroys group name.
//
// Called in an actor method of a member (ctx is the method's), it releases
// the member's connections in its node's plugin, and withdraws the
// declaration, so that no one joins it any more; the other members are
// released when they call DestroyGroup too (the Ray pattern: every member
// destroys its group) or by a DestroyGroup from elsewhere. Called anywhere
// else (the driver), it withdraws the declaration and releases every
// member in its node's plugin; members in the middle of a call then fail
// with ErrRankFailed, and later calls of members that hold on to the group
// fail with ErrGroupNotFound unless the group has been created again, in
// which case they join the new declaration.
//
// Destroying a group that does not exist is not an error.
func DestroyGroup(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	cw, err := runtime()
	if err != nil {
		return err
	}
	d, err := readDecl(ctx, cw, name)
	if err != nil && !errors.Is(err, ErrGroupNotFound) {
		return err
	}
	if actor, aerr := selfActor(ctx); aerr == nil {
		s := slotFor(actor, name)
		s.mu.Lock()
		m := s.m
		s.m = nil
		s.mu.Unlock()
		if m != nil || (d != nil && slices.Contains(d.Members, actor)) {
			var rerr error
			if m != nil {
				rerr = release(ctx, cw, name, m)
			}
			if d != nil && (m == nil || m.decl.Incarnation == d.Incarnation) {
				if _, err := cw.GCS().KVDel(ctx, &pb.KVDelRequest{Ns: KVNamespace, Key: declKey(cw, name)}); err != nil && rerr == nil {
					rerr = err
				}
			}
			return rerr
		}
	}
	if d != nil {
		if _, err := cw.GCS().KVDel(ctx, &pb.KVDelRequest{Ns: KVNamespace, Key: declKey(cw, name)}); err != nil {
			return fmt.Errorf("goray collective: withdrawing group %q: %w", name, err)
		}
	}
	return releaseAll(ctx, cw, name)
}

// releaseAll releases every recorded member of group name (of every
// incarnation) in its node's plugin, and deletes the records. Members on
// dead nodes are gone with their plugins and only lose their records.
func releaseAll(ctx context.Context, cw *core.CoreWorker, name string) error {
	keys, err := cw.GCS().KVKeys(ctx, &pb.KVKeysRequest{Ns: KVNamespace, Prefix: rankPrefix(cw, name)})
	if err != nil {
		return fmt.Errorf("goray collective: listing the members of group %q: %w", name, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, k := range keys.GetKeys() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := releaseRecord(ctx, cw, k)
			mu.Lock()
			if err != nil && first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return first
}

func releaseRecord(ctx context.Context, cw *core.CoreWorker, key string) error {
	rep, err := cw.GCS().KVGet(ctx, &pb.KVGetRequest{Ns: KVNamespace, Key: key})
	if err != nil {
		return err
	}
	var rec rankRecord
	if rep.GetFound() && json.Unmarshal(rep.GetValue(), &rec) == nil && rec.Group != "" {
		node, _ := ids.Parse(rec.Node)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, derr := cw.Collective(rec.Backend, node).DestroyGroup(dctx, &transport.DestroyGroupRequest{Group: rec.Group, Rank: rec.Rank})
		cancel()
		if derr != nil && !errors.Is(derr, transport.ErrGroupNotFound) && !unreachable(derr) {
			return fmt.Errorf("goray collective: releasing rank %d of group %q on node %s: %w", rec.Rank, rec.Group, node.Short(), derr)
		}
	}
	_, err = cw.GCS().KVDel(ctx, &pb.KVDelRequest{Ns: KVNamespace, Key: key})
	return err
}
