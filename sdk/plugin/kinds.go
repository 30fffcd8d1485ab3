package plugin

// Plugin kinds: the first label of a `plugin "<kind>" "<name>"` block.
const (
	// KindTransport is a tensor transport (sdk/transport).
	KindTransport = "transport"
	// KindStorage is a storage backend for spilled objects (sdk/storage).
	KindStorage = "storage"
	// KindProvider is a provider of the autoscaler's instances (sdk/provider).
	KindProvider = "provider"
)

// Kinds lists every plugin kind in the order messages show them. It is the
// one list: config validation, the host's supported API versions and
// `goray plugins` all read it, so a new kind is a constant and an entry
// here (plus its SDK package).
var Kinds = []string{KindTransport, KindStorage, KindProvider}
