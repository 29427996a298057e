"""A minimal DRA kubelet plugin for harness tests: one shareable device, real gRPC sockets.

It is deliberately tiny, so a failing end-to-end test points at the harness, not at the
driver: it publishes one ResourceSlice, registers through the registration socket, and on
prepare writes one CDI spec per claim whose env names the claim, device and consumed memory.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures
from pathlib import Path

import grpc
from harness.manifests import DRIVER, device
from kubernetes import client

from dra_driver._proto.dra.v1 import api_pb2 as dra
from dra_driver._proto.dra.v1 import api_pb2_grpc as dra_grpc
from dra_driver._proto.pluginregistration.v1 import api_pb2 as reg
from dra_driver._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.k8s import raw


class MinimalPlugin(reg_grpc.RegistrationServicer, dra_grpc.DRAPluginServicer):
    """Serves Registration and DRAPlugin v1 for one node."""

    def __init__(self, api_client: client.ApiClient, node: str, root: Path) -> None:
        self.node = node
        self.registry_dir = root / "plugins_registry"
        self.plugin_dir = root / "plugins" / DRIVER
        self.cdi_root = root / "cdi"
        for path in (self.registry_dir, self.plugin_dir, self.cdi_root):
            path.mkdir(parents=True, exist_ok=True)
        self._resource = client.ResourceV1Api(api_client)
        self.prepared: list[str] = []
        self.unprepared: list[str] = []
        self.registered = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        reg_grpc.add_RegistrationServicer_to_server(self, self._server)
        dra_grpc.add_DRAPluginServicer_to_server(self, self._server)

    def publish(self) -> None:
        slice_ = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{self.node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": self.node,
                "pool": {"name": self.node, "generation": 1, "resourceSliceCount": 1},
                "devices": [device("gpu-0")],
            },
        }
        raw.call(self._resource.create_resource_slice, slice_)

    def start(self) -> None:
        self._server.add_insecure_port(f"unix://{self.plugin_dir / 'dra.sock'}")
        self._server.add_insecure_port(f"unix://{self.registry_dir / f'{DRIVER}-reg.sock'}")
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait()

    # Registration
    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:  # noqa: N802
        return reg.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=str(self.plugin_dir / "dra.sock"),
            supported_versions=["v1.DRAPlugin"],
        )

    def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            self.registered.set()
        return reg.RegistrationStatusResponse()

    # DRAPlugin
    def NodePrepareResources(  # noqa: N802
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        response = dra.NodePrepareResourcesResponse()
        for ref in request.claims:
            claim = raw.call(self._resource.read_namespaced_resource_claim, ref.name, ref.namespace)
            if claim["metadata"]["uid"] != ref.uid:
                response.claims[ref.uid].error = "claim UID changed"
                continue
            devices = []
            spec_devices = []
            for result in claim["status"]["allocation"]["devices"]["results"]:
                name = f"{ref.uid}-{result['device']}-{result.get('shareID', 'x')}"
                memory = result.get("consumedCapacity", {}).get("memory", "")
                spec_devices.append(
                    {
                        "name": name,
                        "containerEdits": {
                            "env": [
                                f"TEST_CLAIM_UID={ref.uid}",
                                f"TEST_DEVICE={result['device']}",
                                f"TEST_MEMORY={memory}",
                            ]
                        },
                    }
                )
                devices.append(
                    dra.Device(
                        request_names=[result["request"].split("/")[0]],
                        pool_name=result["pool"],
                        device_name=result["device"],
                        cdi_device_ids=[f"k8s.{DRIVER}/claim={name}"],
                        share_id=result.get("shareID", ""),
                    )
                )
            spec = {"cdiVersion": "0.5.0", "kind": f"k8s.{DRIVER}/claim", "devices": spec_devices}
            (self.cdi_root / f"k8s.{DRIVER}-claim_{ref.uid}.json").write_text(json.dumps(spec))
            response.claims[ref.uid].devices.extend(devices)
            self.prepared.append(ref.uid)
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        response = dra.NodeUnprepareResourcesResponse()
        for ref in request.claims:
            (self.cdi_root / f"k8s.{DRIVER}-claim_{ref.uid}.json").unlink(missing_ok=True)
            self.unprepared.append(ref.uid)
            response.claims[ref.uid].error = ""
        return response
