"""What each published card holds, for ``status``, ``plan`` and ``simulate``.

One model (:mod:`.model`) built from API objects alone (ResourceSlices and ResourceClaims),
and one way of writing it (:mod:`.render`).
"""
