#!/usr/bin/env bash
# For machines with Docker: a kind cluster with KWOK and the same simulated GPU nodes the local control plane uses.
# Not tried on the development machine of this project (it has no Docker engine); the local control plane
# (`superpod cluster up`) is what CI tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/versions.env
name=${KIND_CLUSTER_NAME:-superpod}
preset=${1:-dgx-h100}
kind create cluster --name "$name" --image "kindest/node:${K8S_VERSION}"
export KUBECONFIG="${KUBECONFIG:-$HOME/.kube/config}"
release="https://github.com/kubernetes-sigs/kwok/releases/download/${KWOK_VERSION}"
kubectl apply -f "$release/kwok.yaml"  # the KWOK controller; it manages nodes annotated kwok.x-k8s.io/node=fake
kubectl wait --for=condition=Established crd/stages.kwok.x-k8s.io --timeout=60s
kubectl apply -f operator/superpod/localcluster/kwok-stages.yaml  # our node and pod lifecycle stages
kubectl -n kube-system rollout status deployment/kwok-controller --timeout=120s
superpod sim cluster --preset "$preset"
echo "kind cluster $name is up with the $preset preset; run the tests with: KUBECONFIG=$KUBECONFIG bash hack/test.sh"
