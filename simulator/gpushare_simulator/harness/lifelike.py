"""Objects shaped like a real cluster's, for memory measurements and the slimming tests.

The harness's own objects carry only what a test needs; a real API server's carry much more:
``managedFields`` for every writer, a pod's environment, probes, volumes and container
statuses, a node's image list, conditions and system info. Memory measured on thin objects
would flatter the controller, so these builders add what a kubelet, a Deployment controller
and kube-scheduler leave on their objects, with sizes taken from ordinary clusters.
"""

from __future__ import annotations

from typing import Final

from dra_driver.k8s.objects import Object

_STAMP: Final = "2026-11-20T10:00:00Z"


def _managed(*managers: tuple[str, str, Object]) -> list[Object]:
    return [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": "v1",
            "time": _STAMP,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
        for manager, operation, fields in managers
    ]


def _fields(*paths: str) -> Object:
    """Return a fieldsV1 tree naming each dotted path, as managedFields records ownership."""
    tree: Object = {}
    for path in paths:
        node = tree
        for part in path.split("."):
            node = node.setdefault(f"f:{part}", {})
    return tree


def lifelike_node(node: Object, images: int = 40) -> Object:
    """Return ``node`` (a thin Node) with what a kubelet reports on a GPU node."""
    name = node["metadata"]["name"]
    labels = {
        **node["metadata"].get("labels", {}),
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": "us-east-1a",
        "nvidia.com/gpu.present": "true",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }
    resources = {"cpu": "191", "memory": "2113264Mi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        **node,
        "metadata": {
            **node["metadata"],
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": '{"ebs.csi.aws.com":"i-0123456789abcdef0"}',
            },
            "managedFields": _managed(
                ("kubelet", "Update", _fields(*(f"metadata.labels.{k}" for k in labels))),
                ("kubelet", "Update", _fields("status.conditions", "status.images")),
            ),
        },
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "addresses": [
                {"type": "InternalIP", "address": "10.0.12.34"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                {
                    "type": kind,
                    "status": "False" if kind != "Ready" else "True",
                    "lastHeartbeatTime": _STAMP,
                    "lastTransitionTime": _STAMP,
                    "reason": f"Kubelet{kind}",
                    "message": f"kubelet reports {kind}",
                }
                for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [
                {
                    "names": [
                        f"registry.example.com/team/image-{i}@sha256:{i:064x}",
                        f"registry.example.com/team/image-{i}:v1.{i}.0",
                    ],
                    "sizeBytes": 100_000_000 + i,
                }
                for i in range(images)
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": f"boot-{name}",
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": "6.1.0-25-amd64",
                "kubeProxyVersion": "v1.36.2",
                "kubeletVersion": "v1.36.2",
                "machineID": f"machine-{name}",
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "systemUUID": f"system-{name}",
            },
        },
    }


def lifelike_pod(pod: Object, node: str | None) -> Object:
    """Return ``pod`` (a thin Pod) as a Deployment's running pod looks, bound to ``node``."""
    name = pod["metadata"]["name"]
    spec = pod["spec"]
    container = {
        "name": "server",
        "image": "registry.example.com/ml/inference-server:v2.14.1",
        "command": ["python", "-m", "server"],
        "args": ["--port=8080", "--model=/models/current", "--batch=16"],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(12)],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "4", "memory": "16Gi"},
            "limits": {"memory": "16Gi"},
            "claims": [{"name": "gpu"}],
        },
        "volumeMounts": [
            {"name": "models", "mountPath": "/models", "readOnly": True},
            {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io"},
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/live", "port": 8080}, "periodSeconds": 10},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    status: Object = {"phase": "Pending"}
    if node is not None:
        status = {
            "phase": "Running",
            "hostIP": "10.0.12.34",
            "podIP": "192.168.7.21",
            "startTime": _STAMP,
            "qosClass": "Burstable",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": _STAMP}
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "server",
                    "ready": True,
                    "restartCount": 0,
                    "image": container["image"],
                    "imageID": f"registry.example.com/ml/inference-server@sha256:{0:064x}",
                    "containerID": f"containerd://{abs(hash(name)):064x}"[:77],
                    "started": True,
                    "state": {"running": {"startedAt": _STAMP}},
                }
            ],
        }
    return {
        **pod,
        "metadata": {
            **pod["metadata"],
            "labels": {"app": "inference", "pod-template-hash": "7d9f8c6b5"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "inference-7d9f8c6b5",
                    "uid": "rs-uid",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": _managed(
                ("kube-controller-manager", "Update", _fields("metadata.labels", "spec")),
                ("kubelet", "Update", _fields("status.conditions", "status.containerStatuses")),
            ),
        },
        "spec": {
            **spec,
            **({"nodeName": node} if node is not None else {}),
            "containers": [container],
            "volumes": [
                {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
                        ]
                    },
                },
            ],
            "dnsPolicy": "ClusterFirst",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
        "status": status,
    }


def lifelike_claim(claim: Object) -> Object:
    """Return ``claim`` with the managedFields its writers leave on it (three managers)."""
    return {
        **claim,
        "metadata": {
            **claim["metadata"],
            "managedFields": _managed(
                ("kube-controller-manager", "Update", _fields("metadata.ownerReferences", "spec")),
                ("gpushare-dra", "Update", _fields("status.allocation", "metadata.finalizers")),
                ("kube-scheduler", "Update", _fields("status.reservedFor")),
            ),
        },
    }
