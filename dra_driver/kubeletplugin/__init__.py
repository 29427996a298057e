"""The kubelet plugin: publishes a node's cards and prepares claims as CDI devices (DaemonSet)."""
