"""Kubernetes client helpers shared by every component: errors, client construction."""
