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
docker build -f operator/Dockerfile -t superpod-scheduler:0.1.0 .
kind load docker-image superpod-scheduler:0.1.0 --name "$name"
# The operator runs on kind's real node, not on a simulated one (KWOK would only pretend to run it).
helm install superpod-scheduler charts/superpod-scheduler -n superpod-system --create-namespace \
  --set topology.create=true --set image.tag=0.1.0 \
  --set-json 'affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"type","operator":"NotIn","values":["kwok"]}]}]}}}' \
  --set-json 'tolerations=[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]'
echo "kind cluster $name is up with the $preset preset; run the tests with: KUBECONFIG=$KUBECONFIG bash hack/test.sh"
