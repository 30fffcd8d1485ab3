"""Named shared-memory segments in /dev/shm, as sdk/transport/shmem.

A segment is a file in /dev/shm mapped MAP_SHARED, so every process that
maps it sees the same pages. Names start with PREFIX ("goray-t-") so a node
can remove what crashed processes left behind.
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
from contextlib import contextmanager
from typing import Iterator, List

#: Where segments live.
DIR = "/dev/shm"
#: Starts the name of every goray tensor segment.
PREFIX = "goray-t-"
#: The longest segment name accepted.
MAX_NAME_LEN = 200


class ShmemError(Exception):
    """A failed operation on a named segment."""


class NotFoundError(ShmemError):
    """The segment does not exist."""


class ExistsError(ShmemError):
    """A segment of that name exists already."""


class BadNameError(ShmemError):
    """The name is empty, too long or contains a slash or NUL."""


def valid_name(name: str) -> None:
    """Raises BadNameError unless name can name a segment."""
    if not name or len(name) > MAX_NAME_LEN or "/" in name or name in (".", "..") or "\x00" in name:
        raise BadNameError(f"shmem: name {name[:60]!r}: invalid shared-memory segment name")


def path(name: str) -> str:
    return os.path.join(DIR, name)


def new_name(prefix: str = PREFIX) -> str:
    """prefix followed by 32 random hex digits."""
    return prefix + secrets.token_hex(16)


def _wrap(op: str, name: str, e: OSError) -> ShmemError:
    if e.errno == errno.ENOENT:
        return NotFoundError(f"shmem: {op} {name!r}: shared-memory segment not found")
    if e.errno == errno.EEXIST:
        return ExistsError(f"shmem: {op} {name!r}: shared-memory segment already exists")
    return ShmemError(f"shmem: {op} {name!r}: {e}")


def create(name: str, size: int) -> None:
    """Creates a zero-filled segment of size bytes; ExistsError if taken."""
    valid_name(name)
    try:
        fd = os.open(path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise _wrap("create", name, e) from None
    try:
        os.ftruncate(fd, size)
    except OSError as e:
        os.close(fd)
        os.unlink(path(name))
        raise _wrap("create", name, e) from None
    os.close(fd)


def stat(name: str) -> int:
    """The segment's size in bytes; NotFoundError if there is none."""
    valid_name(name)
    try:
        return os.stat(path(name)).st_size
    except OSError as e:
        raise _wrap("stat", name, e) from None


def exists(name: str) -> bool:
    try:
        stat(name)
        return True
    except ShmemError:
        return False


def unlink(name: str) -> None:
    """Removes the segment's name; NotFoundError if there is none."""
    valid_name(name)
    try:
        os.unlink(path(name))
    except OSError as e:
        raise _wrap("unlink", name, e) from None


def list_prefix(prefix: str) -> List[str]:
    """Names of the segments starting with prefix, sorted."""
    return sorted(n for n in os.listdir(DIR) if n.startswith(prefix) and os.path.isfile(path(n)))


def publish(name: str, data: bytes) -> None:
    """Atomically creates a segment holding data: other processes see no
    segment or all of it. ExistsError if the name is taken."""
    valid_name(name)
    tmp = new_name(name + ".tmp-")
    fd = os.open(path(tmp), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.link(path(tmp), path(name))
    except OSError as e:
        raise _wrap("publish", name, e) from None
    finally:
        try:
            os.unlink(path(tmp))
        except OSError:
            pass


def read_all(name: str, limit: int) -> bytes:
    """The contents of a (small) segment; a segment bigger than limit is an
    error."""
    valid_name(name)
    try:
        with open(path(name), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise ShmemError(f"shmem: read {name!r}: {size} bytes, limit {limit}")
            return f.read(size)
    except OSError as e:
        raise _wrap("read", name, e) from None


@contextmanager
def mapped(name: str, offset: int, length: int) -> Iterator[memoryview]:
    """Maps [offset, offset+length) of a segment read-write for the duration
    of the with block."""
    valid_name(name)
    try:
        fd = os.open(path(name), os.O_RDWR)
    except OSError as e:
        raise _wrap("open", name, e) from None
    try:
        size = os.fstat(fd).st_size
        if offset < 0 or length < 0 or offset + length > size:
            raise ShmemError(
                f"shmem: map {name!r}: bytes [{offset}, {offset + length}) outside a segment of {size} bytes"
            )
        if length == 0:
            yield memoryview(b"")
            return
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    view = memoryview(m)
    try:
        part = view[offset : offset + length]
        try:
            yield part
        finally:
            part.release()
    finally:
        view.release()
        m.close()
