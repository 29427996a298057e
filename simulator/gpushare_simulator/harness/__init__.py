"""Test harness: fake API server, cluster actors, fake GPUs; shipped for `simulate`."""
