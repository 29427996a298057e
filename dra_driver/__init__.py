"""gpushare DRA driver: share NVIDIA GPUs by cores and memory through Kubernetes DRA."""

__version__ = "0.2.0"
