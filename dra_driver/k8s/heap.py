"""Keep what a component loads at start-up out of the cyclic garbage collector's walks.

CPython's cyclic collector walks every tracked object it holds in a full collection, and
collections come with allocation, so in the middle of a request. A component's start-up
leaves tens of thousands of objects that live until it exits (modules, the Kubernetes
client's models, the gRPC and protobuf runtime, loaded state): walking them is most of a full
collection's cost and never frees anything. :func:`freeze_startup_heap` moves them to the
collector's permanent generation once start-up is done. Reference counting still frees any of
them that is dropped later; only a cycle among them would outlive its last use, which is why
nothing that churns is frozen after start-up.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what start-up left as garbage, freeze the rest; return how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
