"""gpushare-dra-simulator: ``gpushare-dra simulate`` and the test harness behind it.

:mod:`gpushare_simulator.harness` is a Kubernetes cluster without containers or GPUs (a fake
API server, or a real control plane with real kubelets, and fake cards);
:mod:`gpushare_simulator.simulate` runs the driver's components on it through the acceptance
scenarios. A distribution of its own, so that the driver's install and image hold none of it.
"""
