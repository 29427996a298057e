"""Container Device Interface: per-claim spec names and container edits for the kubelet plugin."""
