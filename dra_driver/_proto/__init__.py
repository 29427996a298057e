"""Generated kubelet gRPC stubs; do not edit, regenerate with hack/gen-protos.sh."""
