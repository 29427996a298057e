"""The CDI spec model: container edits, devices, the spec document, and writing it atomically.

The dataclasses are immutable values; :meth:`CdiSpec.to_dict` turns one into the JSON object
a container runtime loads, with ``cdiVersion`` set to the lowest version that has every
feature the spec uses (older runtimes vendor older CDI libraries and refuse newer versions).
:class:`StagedFile`, :func:`atomic_write_bytes` (and its wrappers) and :func:`ensure_directory`
are the only things in the package that touch the filesystem.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dra_driver.cdi.validate import required_version, validate_spec

__all__ = [
    "CdiDevice",
    "CdiSpec",
    "ContainerEdits",
    "DeviceNode",
    "Hook",
    "Mount",
    "StagedFile",
    "atomic_write_bytes",
    "atomic_write_json",
    "canonical_json",
    "canonical_object",
    "json_bytes",
    "spec_bytes",
    "sync_directory_of",
    "validate_spec",
]

READ_ONLY_BIND = ("ro", "nosuid", "nodev", "bind")
READ_WRITE_BIND = ("rw", "nosuid", "nodev", "bind")

_T = TypeVar("_T")


@dataclass(frozen=True)
class DeviceNode:
    """A device node in the container; ``host_path`` when it lives elsewhere on the host."""

    path: str
    host_path: str | None = None
    permissions: str = "rw"

    def to_dict(self) -> dict[str, Any]:
        """Return the CDI ``deviceNodes[]`` entry."""
        node: dict[str, Any] = {"path": self.path}
        if self.host_path is not None:
            node["hostPath"] = self.host_path
        node["permissions"] = self.permissions
        return node


@dataclass(frozen=True)
class Mount:
    """A bind mount of a host path into the container, read-only unless the options say rw."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = READ_ONLY_BIND

    def to_dict(self) -> dict[str, Any]:
        """Return the CDI ``mounts[]`` entry."""
        return {
            "hostPath": self.host_path,
            "containerPath": self.container_path,
            "options": list(self.options),
        }


@dataclass(frozen=True)
class Hook:
    """A program the runtime runs in the container's lifecycle, with the host's binaries."""

    path: str
    args: tuple[str, ...]
    hook_name: str = "createContainer"

    def to_dict(self) -> dict[str, Any]:
        """Return the CDI ``hooks[]`` entry."""
        return {"hookName": self.hook_name, "path": self.path, "args": list(self.args)}


def _last_wins(items: Iterable[_T], key: Callable[[_T], object]) -> tuple[_T, ...]:
    """Keep one item per key: the last one given, at the place where the key first appeared."""
    merged: dict[object, _T] = {}
    for item in items:
        merged[key(item)] = item
    return tuple(merged.values())


@dataclass(frozen=True)
class ContainerEdits:
    """Edits for a container: ``env`` entries are ``"K=V"`` strings, as in CDI."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()

    def merge(self, other: ContainerEdits) -> ContainerEdits:
        """Return these edits followed by ``other``'s, the later one winning as a runtime does.

        A variable, a device node (by path) or a mount (by container path) that both set keeps
        ``other``'s value; the runtime would replace it the same way when applying both. Hooks
        add up (the same hook twice is kept once).
        """
        return ContainerEdits(
            env=_last_wins((*self.env, *other.env), lambda entry: entry.partition("=")[0]),
            device_nodes=_last_wins(
                (*self.device_nodes, *other.device_nodes), lambda node: node.path
            ),
            mounts=_last_wins((*self.mounts, *other.mounts), lambda m: m.container_path),
            hooks=tuple(dict.fromkeys((*self.hooks, *other.hooks))),
        )

    def is_empty(self) -> bool:
        """Whether there is nothing to edit (CDI refuses a device with no edits)."""
        return not (self.env or self.device_nodes or self.mounts or self.hooks)

    def to_dict(self) -> dict[str, Any]:
        """Return the CDI ``containerEdits`` object; empty lists are left out, as CDI does."""
        edits: dict[str, Any] = {}
        if self.env:
            edits["env"] = list(self.env)
        if self.device_nodes:
            edits["deviceNodes"] = [node.to_dict() for node in self.device_nodes]
        if self.mounts:
            edits["mounts"] = [mount.to_dict() for mount in self.mounts]
        if self.hooks:
            edits["hooks"] = [hook.to_dict() for hook in self.hooks]
        return edits


@dataclass(frozen=True)
class CdiDevice:
    """One named device of a spec; its CDI ID is ``<kind>=<name>``."""

    name: str
    edits: ContainerEdits

    def to_dict(self) -> dict[str, Any]:
        """Return the CDI ``devices[]`` entry."""
        return {"name": self.name, "containerEdits": self.edits.to_dict()}


@dataclass(frozen=True)
class CdiSpec:
    """A CDI spec: a kind (``vendor/class``), its devices, and edits for any of them."""

    kind: str
    devices: tuple[CdiDevice, ...]
    edits: ContainerEdits | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the spec document, with the minimum ``cdiVersion`` its features need."""
        doc: dict[str, Any] = {
            "cdiVersion": "",
            "kind": self.kind,
            "devices": [device.to_dict() for device in self.devices],
        }
        if self.edits is not None and not self.edits.is_empty():
            doc["containerEdits"] = self.edits.to_dict()
        doc["cdiVersion"] = required_version(doc)
        return doc


def canonical_json(value: Any) -> str:  # noqa: ANN401 - any JSON value
    """Return ``value`` as canonical JSON: keys sorted, no spaces, no NaN.

    The one rendering used for a CDI spec and for the checkpoint's checksums: the same value
    always gives the same text, so a spec restored from its checkpoint entry is byte for byte
    the spec first written. Compact on purpose: CPython encodes it in C, several times faster
    than indented JSON, and a prepare writes one per claim (``jq`` reads it indented).
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def canonical_object(members: Mapping[str, str]) -> str:
    """Return the :func:`canonical_json` of an object whose members are already canonical text.

    ``members`` maps each key (plain ASCII, needing no escape) to its value's canonical JSON,
    so that a value kept as text is not parsed only to be written out again.
    """
    return "{" + ",".join(f'"{key}":{members[key]}' for key in sorted(members)) + "}"


def spec_bytes(text: str) -> bytes:
    """Return the content of a spec file holding ``text`` (as :func:`canonical_json` wrote it)."""
    return (text + "\n").encode()


def json_bytes(doc: Mapping[str, Any]) -> bytes:
    """Return ``doc`` as the plugin writes a spec file: :func:`canonical_json` and a newline."""
    return spec_bytes(canonical_json(doc))


def atomic_write_json(path: Path, doc: Mapping[str, Any], mode: int = 0o644) -> None:
    """Replace ``path`` with ``doc`` as :func:`json_bytes`; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, json_bytes(doc), mode)


class StagedFile:
    """A file's new content written to a hidden temporary file beside it, not yet in place.

    :meth:`commit` fsyncs it (unless told not to) and renames it over the path; :meth:`discard`
    removes it if it was never committed. :attr:`inode` is the file's inode number, which it
    keeps once renamed into place: a reader can tell its content from an older one by it.
    """

    def __init__(self, path: Path, data: bytes, mode: int) -> None:
        """Write ``data`` to ``.<name>.*.tmp`` in ``path``'s directory, with ``mode``."""
        self.path = path
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        self._fd: int | None = fd
        self._temporary = name
        try:
            self.inode = os.fstat(fd).st_ino
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            self.discard()
            raise

    def commit(self, *, sync_file: bool = True) -> None:
        """Fsync the content (if ``sync_file``) and rename it over the path."""
        if self._fd is None:
            raise ValueError(f"{self.path}: staged content already committed or discarded")
        try:
            if sync_file:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            os.replace(self._temporary, self.path)  # noqa: PTH105 - str path: no Path parsing per file
        except BaseException:
            self.discard()
            raise
        self._temporary = ""

    def discard(self) -> None:
        """Remove the temporary file unless it was committed; never raises."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._temporary:
            with contextlib.suppress(OSError):
                os.unlink(self._temporary)  # noqa: PTH108 - str path, as mkstemp returned it
            self._temporary = ""


def atomic_write_bytes(
    path: Path,
    data: bytes,
    mode: int = 0o644,
    *,
    sync_file: bool = True,
    sync_directory: bool = True,
) -> None:
    """Replace ``path`` with ``data``, so that a reader sees the old or the new file.

    The data goes to a hidden temporary file in the same directory (named ``.<name>.*.tmp``,
    which no CDI runtime loads), is fsynced, then renamed over ``path``; the directory is
    fsynced so that the rename survives a power cut (a caller writing several files may do
    that once, with :func:`sync_directory_of`, or stage them with :class:`StagedFile`). A
    caller that can rebuild the file after a power cut may skip both fsyncs. On any failure
    the temporary file is removed and ``path`` is left as it was.
    """
    StagedFile(path, data, mode).commit(sync_file=sync_file)
    if sync_file and sync_directory:
        sync_directory_of(path)


def ensure_directory(path: Path, mode: int) -> None:
    """Create the directory ``path`` if it is missing and give it ``mode``, never via a symlink.

    ``mkdir`` then ``chmod`` would follow a symlink planted at ``path`` and open up whatever it
    points at, so the mode is set through a descriptor opened with ``O_NOFOLLOW``. Raises
    :class:`OSError` naming the path when it is a symlink or not a directory.
    """
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        directory_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(
                exc.errno, f"{path} is a symlink or not a directory; refusing to use it"
            ) from exc
        raise
    try:
        os.fchmod(directory_fd, mode)
    finally:
        os.close(directory_fd)


def read_regular(path: Path) -> bytes:
    """Read ``path`` if it is a regular file; a symlink, FIFO or device is a ValueError.

    The kubelet plugin runs as root: following a link planted in its directories would read a
    file of someone else's choosing, and opening a FIFO would hang the reader.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("it is a symlink, not a regular file") from exc
        raise
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ValueError("it is not a regular file")
        return file.read()


def sync_directory_of(path: Path) -> None:
    """Fsync the directory holding ``path``, so renames and unlinks in it are durable."""
    directory_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)
