"""Kubernetes DRA structured-parameters semantics shared by every allocator in this project.

Consumable-capacity arithmetic, the device CEL environment and the allocated-state model follow
kube-scheduler's ``k8s.io/dynamic-resource-allocation/structured`` package, so the controller,
the webhook and the test harness's stand-in scheduler all count a share the same way.
"""
