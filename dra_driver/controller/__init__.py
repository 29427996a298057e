"""The allocation controller: places ResourceClaims on cards by cores and memory (Deployment)."""
