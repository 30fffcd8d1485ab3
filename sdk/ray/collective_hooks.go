package ray

import "github.com/goray-dev/goray/sdk/transport"

// ReleaseTensors says the program is done with tensors it received from a
// tensor transport (by Get, or as a task or method argument). Segments the
// transport allocated for this process — copies, for example tensors that
// came from another node (transport.ReceiveResponse.Allocated) — are
// unlinked; tensors that share the source's memory (zero copy, such as the
// shm transport's or a one-sided read within a machine) are left to their
// source, which frees them when the object's last reference is gone, and
// only this process's idle mapping of them is dropped. Segments this
// process did not receive are never unlinked, so it is always safe to call.
// Do not use the tensors afterwards. Copies never released are unlinked
// when the process shuts down, or by its node if the process dies.
func ReleaseTensors(tensors []transport.Tensor) error {
	cw, err := current()
	if err != nil {
		return err
	}
	return cw.ReleaseTensors(tensors)
}
