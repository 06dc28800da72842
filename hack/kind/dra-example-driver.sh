#!/usr/bin/env bash
# Installs the DRA example driver (hack/kind/dra-example-driver.yaml) on the kind cluster KUBECONFIG names and
# waits until every worker publishes its ResourceSlice of gpu.example.com devices. Needs kubectl on PATH (the folder
# hack/build.sh --kind prints) and a cluster from hack/kind-up.sh, whose node image holds the driver's image.
#   hack/kind/dra-example-driver.sh          install (or update) and wait
#   hack/kind/dra-example-driver.sh delete   remove it (the DeviceClass and the slices too)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../versions.env"
log() { printf '[dra-example-driver %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
manifest() { sed "s|DRA_EXAMPLE_DRIVER_VERSION|$DRA_EXAMPLE_DRIVER_VERSION|" "$here/dra-example-driver.yaml"; }

if [ "${1:-}" = delete ]; then
  manifest | kubectl delete --ignore-not-found -f - >/dev/null
  kubectl delete resourceslices --field-selector spec.driver=gpu.example.com --ignore-not-found >/dev/null
  exit 0
fi
started=$SECONDS
manifest | kubectl apply -f - >/dev/null
kubectl -n dra-example-driver rollout status daemonset/kubelet-plugin --timeout=120s >/dev/null
workers=$(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name | sed 's|^node/||' | sort)
for _ in $(seq 60); do
  published=$(kubectl get resourceslices --field-selector spec.driver=gpu.example.com \
    -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u || true)
  if [ "$published" = "$workers" ]; then
    log "installed $DRA_EXAMPLE_DRIVER_VERSION: a ResourceSlice on each of $(echo "$workers" | wc -l) workers in $((SECONDS - started))s"
    exit 0
  fi
  sleep 1
done
log "not every worker published a gpu.example.com ResourceSlice: ${published:-none} of $(echo "$workers" | tr '\n' ' ')"
exit 1
