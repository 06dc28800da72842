"""A real local Kubernetes control plane for development and tests: etcd, kube-apiserver, controller-manager,
scheduler and KWOK."""
