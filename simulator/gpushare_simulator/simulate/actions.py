"""What a scenario's step does to the cluster: what a user does with kubectl, and CUDA work."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Apply:
    """Create the manifest's documents labelled ``step: <step>``; all the rest when ``None``.

    ``node``: the pods they make get a ``nodeSelector`` on that node's hostname, added by the
    simulation (the files name no node); ``None`` leaves them where the controller puts them.
    """

    step: str | None = None
    node: str | None = None


@dataclasses.dataclass(frozen=True)
class Complete:
    """The pods of a Job (``Job/<name>``) finish successfully, as the kubelet reports it."""

    owner: str


@dataclasses.dataclass(frozen=True)
class Delete:
    """The pods of a document (``Deployment/<name>``) are deleted, as deleting it would."""

    owner: str


@dataclasses.dataclass(frozen=True)
class Busy:
    """A CUDA process in the pod launches kernels without pause (its region is created first)."""

    pod: str


@dataclasses.dataclass(frozen=True)
class Idle:
    """The pod's CUDA process stops launching kernels (it keeps its memory)."""

    pod: str


Action = Apply | Complete | Delete | Busy | Idle


def describe(action: Action, manifest: str) -> str:
    """Say what ``action`` does to the cluster applying ``manifest``, in one line."""
    match action:
        case Apply(step=step):
            selector = f" -l step={step}" if step else ""
            return f"kubectl apply -f {manifest}{selector}"
        case Complete(owner=owner):
            return f"{owner} completes: its pods exit 0"
        case Delete(owner=owner):
            kind, _, name = owner.partition("/")
            return f"kubectl delete {kind.lower()} {name}"
        case Busy(pod=pod):
            return f"{pod}: a CUDA process launches kernels without pause"
        case Idle(pod=pod):
            return f"{pod}: its CUDA process stops launching kernels"
