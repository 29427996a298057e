"""Cluster actors: in-process stand-ins for kube-controller-manager, kube-scheduler, kubelet."""
