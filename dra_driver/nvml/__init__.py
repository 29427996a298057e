"""Card discovery behind a narrow interface: NVML on real nodes, a YAML inventory in tests."""
