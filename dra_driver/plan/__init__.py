"""Capacity planning (``gpushare-dra plan``): where workloads would land, and why not.

The same allocation engine the controller runs, fed with a cluster built from a fake GPU
inventory or read from a live cluster, and with the pods a workload file would create.
Nothing is written anywhere: a plan only reads.
"""
