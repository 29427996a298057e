"""Generated from api/kubelet; do not edit, regenerate with hack/gen-protos.sh."""
