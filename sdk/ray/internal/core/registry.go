package core

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/sdk/transport"
)

// ArgValue is one encoded argument as the worker received it. Data may point
// into shared memory and is valid only while the task runs.
type ArgValue struct {
	Format codec.Format
	Data   []byte
	// Tensors are set for tensors that arrived through a transport.
	Tensors []transport.Tensor
	// Index is the argument's position, for error messages.
	Index int
}

// Decode decodes the argument into ptr. A mismatch becomes an ArgTypeError
// naming the argument.
func (a ArgValue) Decode(fn string, ptr any) error {
	decode := func() error {
		if a.Format == codec.FormatTransport {
			return AssignTensors(ptr, a.Tensors)
		}
		if dec := argDecoders[reflect.TypeOf(ptr)]; dec != nil {
			return dec(ptr, a.Format, a.Data)
		}
		return codec.DecodeInto(a.Format, a.Data, ptr, false)
	}
	if err := decode(); err != nil {
		return &RemoteError{Function: fn, Kind: KindArgType, Type: "ArgTypeError",
			Message: fmt.Sprintf("argument %d: %v", a.Index, err)}
	}
	return nil
}

// Invoker runs a registered task function on decoded arguments.
type Invoker func(ctx context.Context, args []ArgValue) (any, error)

// MethodInvoker runs a registered actor method on an actor instance.
type MethodInvoker func(ctx context.Context, self any, args []ArgValue) (any, error)

// Function is a registered task, actor constructor or actor method.
type Function struct {
	Name   string
	NArgs  int
	Task   Invoker       // tasks and constructors
	Method MethodInvoker // methods
	// Class is the actor type name for constructors and methods.
	Class string
	// Streaming: a generator, which sends its values with Yield.
	Streaming bool
}

var registry = struct {
	sync.RWMutex
	m map[string]*Function
}{m: map[string]*Function{}}

// Register adds f to the process-wide registry. Names are Go symbol names,
// so two registrations of one name are the same function registered again
// (for example a test run twice); the later one replaces the earlier.
func Register(f *Function) {
	registry.Lock()
	defer registry.Unlock()
	registry.m[f.Name] = f
}

// Lookup returns the registered function or nil.
func Lookup(name string) *Function {
	registry.RLock()
	defer registry.RUnlock()
	return registry.m[name]
}

// Registered returns the sorted names of all registered functions.
func Registered() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.m))
	for k := range registry.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// FuncName returns the stable name of a Go function value: its fully
// qualified symbol name ("main.add", "example.com/pkg.(*Counter).Inc").
// Closures and method values have unstable names and are rejected.
func FuncName(fn any) (string, error) {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return "", fmt.Errorf("goray: %T is not a function", fn)
	}
	f := runtime.FuncForPC(v.Pointer())
	if f == nil {
		return "", fmt.Errorf("goray: cannot name function %T", fn)
	}
	name := f.Name()
	if strings.Contains(name, ".func") || strings.HasSuffix(name, "-fm") {
		return "", fmt.Errorf("goray: %s is a closure or method value; register a top-level function or a method expression such as (*T).Method", name)
	}
	return name, nil
}
