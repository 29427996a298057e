"""Operator commands against a live cluster: ``cleanup`` (uninstall) and ``status``."""
