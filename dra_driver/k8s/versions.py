"""One resource served under several API versions: use whichever the API server serves.

DeviceTaintRule is ``resource.k8s.io/v1alpha3`` up to 1.35, ``v1beta2`` in 1.36 (only where
the cluster turned it on) and ``v1`` from 1.37. A component that reads it passes the generated
list method of each version, newest first, and the informer calls whichever answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from dra_driver.logging import get_logger

log = get_logger(__name__)

_NOT_SERVED = 404


class FirstServed:
    """A list method (informers call it to list and watch) over several API versions.

    A list tries each version, newest first, and keeps the first the server serves; a watch
    goes to the version the last list used. When no version is served the last 404 is
    raised (an ``optional`` informer then waits for the resource to appear).
    """

    def __init__(self, resource: str, *methods: Callable[..., Any]) -> None:
        if not methods:
            raise ValueError("FirstServed needs at least one list method")
        self._resource = resource
        self._methods = methods
        self._chosen = 0
        # client_of() finds the API client (and its timeouts) through the bound method.
        self.__self__ = getattr(methods[0], "__self__", None)

    def __call__(self, **kwargs: Any) -> Any:  # noqa: ANN401 - the generated client's response
        """List (trying each version) or watch (on the version the last list found)."""
        if kwargs.get("watch"):
            return self._methods[self._chosen](**kwargs)
        *first, last = range(len(self._methods))
        for index in first:
            try:
                return self._chose(index, self._methods[index](**kwargs))
            except client.ApiException as exc:
                if exc.status != _NOT_SERVED:
                    raise
        return self._chose(last, self._methods[last](**kwargs))

    def _chose(self, index: int, response: Any) -> Any:  # noqa: ANN401 - passed through
        if index != self._chosen:
            method = self._methods[index]
            log.info("api.version", resource=self._resource, method=method.__qualname__)
        self._chosen = index
        return response
