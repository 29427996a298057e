"""Settings of the operator commands (``gpushare-dra cleanup``, ``gpushare-dra status``)."""

from __future__ import annotations

import dataclasses

from dra_driver.settings import flag, kubeconfig_flag, output_flag


def _cluster_kubeconfig(purpose: str) -> str | None:
    """Declare the ``--kubeconfig`` of a command that works on a cluster, to ``purpose`` it."""
    return kubeconfig_flag(
        f"kubeconfig of the cluster to {purpose} (default: ~/.kube/config, else the pod's "
        "service account)"
    )


@dataclasses.dataclass(frozen=True)
class CleanupSettings:
    """Removing the driver's finalizers and scheduling gates after an uninstall."""

    kubeconfig: str | None = _cluster_kubeconfig("clean up")
    context: str | None = flag(None, "kubeconfig context to use (default: its current context)")
    namespace: str | None = flag(
        None, "namespace of --wait-for-pods (the release's namespace); required with it"
    )
    wait_for_pods: str | None = flag(
        None,
        "label selector of this driver's controller and plugin pods: wait until none is left "
        "before changing anything, so nothing of ours can add a gate or finalizer again",
    )
    wait_timeout: float = flag(120.0, "seconds to wait for those pods before giving up (exit 1)")
    dry_run: bool = flag(False, "say what would be changed; change nothing")
    output: str = output_flag()


@dataclasses.dataclass(frozen=True)
class StatusSettings:
    """A read-only live view of the cards, shares, quotas, nominations and waiting pods."""

    kubeconfig: str | None = _cluster_kubeconfig("read")
    context: str | None = flag(None, "kubeconfig context to use (default: its current context)")
    output: str = output_flag()
