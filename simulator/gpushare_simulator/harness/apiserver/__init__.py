"""An in-process fake Kubernetes API server that the real ``kubernetes`` client talks to over HTTP.

Real semantics where they matter to a DRA driver: one global resourceVersion, 409 Conflict on a
stale update, watches with history, 410 Expired and bookmarks, label and field selectors, the
three PATCH formats (strategic merge driven by the schemas' patch annotations), finalizers and
``deletionTimestamp``, status subresources, ``pods/binding``, ``pods/eviction`` against
PodDisruptionBudgets whose status clients write (there is no disruption controller; see
:mod:`~gpushare_simulator.harness.apiserver.eviction`), strict schema validation against
the Kubernetes release it emulates plus the DRA semantic rules, feature-gate field dropping
per release, fault injection, and admission webhooks: Mutating- and
ValidatingWebhookConfigurations (admissionregistration.k8s.io/v1) are called over HTTPS with
``admission.k8s.io/v1`` AdmissionReviews on create, update, patch and delete, with the real
server's matching, ordering, reinvocation, failure policies, timeouts, TLS checks and messages
(see :mod:`~gpushare_simulator.harness.apiserver.admission`; ``clientConfig.service`` is
reached through
``FakeApiServer.service_urls``). Opaque ``parameters`` (``runtime.RawExtension``) keep the bytes
they were sent in and are compared byte for byte where a field is immutable, with what each
write type does to them (see :mod:`~gpushare_simulator.harness.apiserver.rawext`); YAML bodies
(``application/yaml``) are accepted for create and update.

Knowingly not implemented: authentication/authorization (any token is accepted; webhooks see
the fixed user ``system:admin``), server-side apply (``application/apply-patch+yaml`` is a
415), protobuf, API versions other than the one served per group (no v1beta1/v1beta2
conversion, so a webhook rule with ``matchPolicy: Equivalent`` matches only the served
version), owner-reference garbage collection and ``propagationPolicy``, consistent snapshots
for paginated lists (continued pages show the current state), ``resourceVersionMatch`` (lists
always answer the latest state), CEL evaluation of selectors and of webhook
``matchConditions`` (a webhook that has them and matches a request fails it with a 500 saying
so, logged, rather than guessing), admission policies (Validating/MutatingAdmissionPolicy),
webhooks for ``pods/binding``, ``bindings`` and ``pods/eviction``, a disruption controller,
calling validating webhooks concurrently (they run one after another, in order), client
certificates for webhooks, the webhook warnings of a request that then fails, computing
managedFields (what a writer sends is kept, and a write that leaves them out keeps the stored
ones), the ``namespaces/finalize`` subresource, and one shared store for the two Event APIs
(core/v1 and events.k8s.io/v1 events are kept apart here; events.k8s.io selects on metadata
fields only).
"""

from gpushare_simulator.harness.apiserver.errors import ApiError
from gpushare_simulator.harness.apiserver.fake import FakeApiServer
from gpushare_simulator.harness.apiserver.faults import Fault, Faults
from gpushare_simulator.harness.apiserver.routing import RequestInfo

__all__ = ["ApiError", "FakeApiServer", "Fault", "Faults", "RequestInfo"]
