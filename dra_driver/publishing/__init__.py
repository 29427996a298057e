"""What a node publishes: the ResourceSlices for its cards and the pool rules for changing them.

Pure functions shared by the kubelet plugin (which writes the slices), ``plan`` and the
simulator (which build the slices a described node would publish) and the tests, so that
every one of them sees the devices the plugin really publishes.
"""
