package node

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// TempRootError reports a temp_dir that a node cannot keep its sessions
// in: owned by another user, or shared with other users.
type TempRootError struct {
	// Path is the temp dir.
	Path string
	// UID is its owner's user id, Owner the user's name when known.
	UID   int
	Owner string
	// Problem says what is wrong.
	Problem string
}

// Error names the directory, its owner and the problem.
func (e *TempRootError) Error() string {
	owner := fmt.Sprintf("uid %d", e.UID)
	if e.Owner != "" {
		owner = fmt.Sprintf("%s (uid %d)", e.Owner, e.UID)
	}
	return fmt.Sprintf("temp dir %s (owner %s) %s; give the node a directory of its own with --temp-dir or temp_dir", e.Path, owner, e.Problem)
}

// PrepareTempRoot makes root, a node's temp_dir, ready to hold session
// directories (sockets, logs, node.json): a missing root is created with
// mode 0700. An existing root must be a directory owned by this user:
// one owned by another user is refused (its owner could replace sessions
// and sockets in it), as is one other users may write to (group- or
// world-writable, or sticky like /tmp: a shared directory, not one of
// goray's own). Read or search permission for others is taken away
// (mode 0700), so nobody else can see into it.
func PrepareTempRoot(root string) error {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("creating temp dir %s: %w", root, err)
	}
	uid := os.Geteuid()
	// A symlink (e.g. /tmp/goray planted by someone else) counts with its
	// own owner, and so does the directory it leads to.
	for _, follow := range []bool{false, true} {
		stat := os.Lstat
		if follow {
			stat = os.Stat
		}
		fi, err := stat(root)
		if err != nil {
			return fmt.Errorf("temp dir %s: %w", root, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("temp dir %s: cannot tell its owner", root)
		}
		if int(st.Uid) != uid {
			return &TempRootError{Path: root, UID: int(st.Uid), Owner: userName(st.Uid),
				Problem: fmt.Sprintf("is owned by another user, not by this one (uid %d), who could replace the sessions and sockets in it", uid)}
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		if !fi.IsDir() {
			return fmt.Errorf("temp dir %s is not a directory", root)
		}
		if fi.Mode()&fs.ModeSticky != 0 || fi.Mode().Perm()&0o022 != 0 {
			return &TempRootError{Path: root, UID: int(st.Uid), Owner: userName(st.Uid),
				Problem: fmt.Sprintf("can be written by other users (mode %s), so it is shared, not goray's own", fi.Mode())}
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(root, 0o700); err != nil {
				return fmt.Errorf("making temp dir %s private (mode 0700): %w", root, err)
			}
		}
		break
	}
	return nil
}

// userName returns the name of user uid, "" when unknown.
func userName(uid uint32) string {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return ""
	}
	return u.Username
}
