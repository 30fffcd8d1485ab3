package ray

import (
	"fmt"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/limits"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// EnvNamespace names the environment variable Init reads for the job's
// namespace when no Namespace option is given.
const EnvNamespace = core.EnvNamespace

// MaxNamespaceLen is the longest namespace, in bytes.
const MaxNamespaceLen = limits.MaxActorNamespaceLen

// anonymousPrefix starts the namespace of a job that names none.
const anonymousPrefix = "anonymous-"

// Namespace puts the job's named actors in namespace ns (Ray's
// namespace): names are unique per namespace, GetActor looks in the job's
// namespace unless told otherwise (InNamespace), and jobs of one
// namespace share its actors. Without it the job uses $GORAY_NAMESPACE,
// else a namespace of its own ("anonymous-<job id>"), so two jobs that
// name none never see each other's actors by name. At most
// MaxNamespaceLen bytes, no control characters.
func Namespace(ns string) InitOption { return func(o *initOptions) { o.namespace = &ns } }

// jobNamespace picks the job's namespace (opt: the Namespace option's,
// else fromEnv, else an anonymous one), checks it and adds it to the
// variables the job's workers get.
func jobNamespace(job *pb.JobInfo, opt *string, fromEnv string) (string, error) {
	ns, from := fromEnv, "$"+EnvNamespace
	if opt != nil {
		ns, from = *opt, "Namespace"
		if ns == "" {
			return "", fmt.Errorf("goray: Namespace(\"\"): a namespace is not empty (leave the option out for a namespace of the job's own)")
		}
	}
	if ns == "" {
		jid, err := ids.FromBytes(job.GetJobId())
		if err != nil {
			return "", err
		}
		ns = anonymousPrefix + jid.String()
	}
	if err := limits.CheckActorNamespace(ns); err != nil {
		return "", fmt.Errorf("goray: %s: namespace %w", from, err)
	}
	job.Env = append(job.Env, EnvNamespace+"="+ns)
	return ns, nil
}

// Namespace returns the job's namespace.
func (rt *Runtime) Namespace() string { return rt.cw.Namespace() }

// GetActorOption configures GetActor.
type GetActorOption func(*getActorOptions)

type getActorOptions struct{ namespace string }

// InNamespace makes GetActor look the name up in namespace ns instead of
// the job's.
func InNamespace(ns string) GetActorOption { return func(o *getActorOptions) { o.namespace = ns } }

// ActorLifetime says what ends an actor (Ray's lifetime option).
type ActorLifetime int

const (
	// OwnedLifetime, the default: the actor ends when killed, when its
	// owner (the process that created it) dies or when its job ends.
	OwnedLifetime ActorLifetime = iota
	// DetachedLifetime: the actor outlives the process and the job that
	// created it, and later jobs find it by name (in its namespace). It
	// ends only when killed (Kill), or when its worker or node fails with
	// no restart left. It must be named (Name). Its owner is the cluster
	// (the GCS), not its creator; the creator still runs its creation, so
	// it must wait for Ready before it exits, and it restarts it
	// (MaxRestarts) while its job runs: a failure after that ends it.
	DetachedLifetime
)

// String returns "owned" or "detached".
func (l ActorLifetime) String() string {
	switch l {
	case OwnedLifetime:
		return "owned"
	case DetachedLifetime:
		return "detached"
	}
	return fmt.Sprintf("ActorLifetime(%d)", int(l))
}

// Lifetime sets an actor's lifetime: Lifetime(DetachedLifetime) is Ray's
// lifetime="detached" (see DetachedLifetime).
func Lifetime(l ActorLifetime) Option { return func(c *callOptions) { c.lifetime = l } }

// GetIfExists makes the creation of a named actor return the live actor
// of the same type that holds the name in the namespace, if there is one,
// instead of failing with ErrActorNameTaken (Ray's get_if_exists). The
// GCS decides atomically: concurrent creators all get one actor. The
// constructor runs only for the actor actually created. An actor of
// another type holding the name is still an *ActorNameTakenError.
func GetIfExists() Option { return func(c *callOptions) { c.getIfExists = true } }

// ActorNamespace creates a named actor in namespace ns instead of the
// job's (Ray's .options(name=..., namespace=ns)): its name is unique in
// ns, GetActor finds it there (InNamespace(ns), or in a job of namespace
// ns), and GetIfExists looks for an existing one there. ns follows the
// rules of Namespace. It applies to named actors only; given to a task or
// an unnamed actor it fails the call with an error saying so.
func ActorNamespace(ns string) Option { return func(c *callOptions) { c.namespace = &ns } }

// actorLifetime checks the lifetime and namespace options of actor class
// name and sets them in o.
func (c callOptions) actorLifetime(name string, o *core.TaskOptions) error {
	if c.namespace != nil {
		if c.name == "" {
			return fmt.Errorf("goray: %s: ActorNamespace(%q): only a named actor (ray.Name) has a namespace", name, *c.namespace)
		}
		if *c.namespace == "" {
			return fmt.Errorf("goray: %s: ActorNamespace(\"\"): a namespace is not empty (leave the option out for the job's)", name)
		}
		if err := limits.CheckActorNamespace(*c.namespace); err != nil {
			return fmt.Errorf("goray: %s: ActorNamespace(%q): namespace %w", name, *c.namespace, err)
		}
		o.Namespace = *c.namespace
	}
	switch c.lifetime {
	case OwnedLifetime:
	case DetachedLifetime:
		if c.name == "" {
			return fmt.Errorf("goray: %s: Lifetime(DetachedLifetime): a detached actor must be named (ray.Name): later jobs find it by its name", name)
		}
		o.Detached = true
	default:
		return fmt.Errorf("goray: %s: Lifetime(%v): not OwnedLifetime or DetachedLifetime", name, c.lifetime)
	}
	if c.getIfExists && c.name == "" {
		return fmt.Errorf("goray: %s: GetIfExists: only a named actor (ray.Name) can be found existing", name)
	}
	o.GetIfExists = c.getIfExists
	return nil
}
