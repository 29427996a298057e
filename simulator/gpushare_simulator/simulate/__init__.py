"""``gpushare-dra simulate``: the real controller, webhook and kubelet plugins on a fake cluster.

The test harness (:mod:`gpushare_simulator.harness`: an API server, the stock cluster actors,
emulated kubelets and fake cards) runs the driver's own components, in this process, against the
example manifests of ``deploy/examples/``; each of the eight acceptance scenarios
(docs/scenarios.md) checks its expectations and the report shows per pod where it landed and
what its container would be told. Nothing of it outlives the command.
"""
