#!/usr/bin/env bash
# A kind cluster with real kubelets on this machine, no registry needed: a private Docker engine (hack/docker.sh),
# a node image built from Debian packages and Go modules (hack/kind/node-image.sh), one control plane and three
# workers that carry topology labels and 8 simulated GPUs each (superpod.hardware.deviceplugin), the operator image built
# from operator/Dockerfile and installed by the chart.
#   hack/kind-up.sh        create (or reuse) the cluster; its last line: `export KUBECONFIG=... DOCKER_HOST=...
#                          KIND_CLUSTER_NAME=... SUPERPOD_OPERATOR_IMAGE=... SUPERPOD_KIND_SHARED=...`
#   hack/kind-up.sh down   delete the cluster (starts the engine to do it; hack/docker.sh down stops it)
# Times every step on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/versions.env
name=${KIND_CLUSTER_NAME:-superpod}
state=${XDG_STATE_HOME:-$HOME/.local/state}/superpod/kind
kubeconfig="$state/$name.kubeconfig"
shared="$state/shared"  # every worker's /shared (hack/kind/cluster.yaml)
operator_image=superpod-scheduler:0.1.0
gpus_per_worker=8
log() { printf '[kind-up %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
step() {  # $1 what, then the command: runs it and logs how long it took
  local what=$1 started=$SECONDS; shift
  "$@"
  log "$what: $((SECONDS - started))s"
}
mkdir -p "$state" "$shared"
docker_env=$(bash hack/docker.sh up)
eval "$docker_env"
PATH="$(bash hack/build.sh --kind | tail -1):$PATH"
export PATH KUBECONFIG=$kubeconfig

if [ "${1:-}" = down ]; then
  kind delete cluster --name "$name" --kubeconfig "$kubeconfig"
  exit 0
fi

node_image=$(bash hack/kind/node-image.sh | tail -1)

# The local python:3.11-slim operator/Dockerfile starts from, from Debian's python3 (3.11). It trusts the host's
# local CA certificates (/usr/local/share/ca-certificates: a TLS-inspecting proxy's, here) so pip reaches PyPI.
python_base() {
  docker image inspect python:3.11-slim >/dev/null 2>&1 && return
  local rootfs; rootfs=$(mktemp -d)/rootfs.tar
  mmdebstrap --quiet --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates,passwd \
    "--dpkgopt=path-exclude=/usr/share/doc/*" "--dpkgopt=path-exclude=/usr/share/man/*" \
    --customize-hook='cp -r /usr/local/share/ca-certificates/. "$1"/usr/local/share/ca-certificates/ 2>/dev/null || true' \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='ln -sf python3 "$1"/usr/bin/python' bookworm "$rootfs"
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' --change 'CMD ["python3"]' \
    "$rootfs" python:3.11-slim >/dev/null
  rm -rf "$(dirname "$rootfs")"
}

create() {
  if kind get clusters 2>/dev/null | grep -qx "$name"; then
    if [ "$(docker inspect -f '{{.Config.Image}}' "$name-control-plane" 2>/dev/null)" = "$node_image" ] &&
      docker inspect -f '{{range .Mounts}}{{.Source}} {{end}}' "$name-worker" | grep -qw "$shared" &&
      kubectl get nodes --request-timeout=10s >/dev/null 2>&1; then
      log "reusing kind cluster $name"; return
    fi
    log "kind cluster $name runs an older node image or does not answer: creating it again"
    kind delete cluster --name "$name" --kubeconfig "$kubeconfig" >/dev/null
  fi
  sed -e "s/COREDNS_VERSION/$COREDNS_VERSION/" -e "s/ETCD_TAG/${ETCD_VERSION#v}-0/" -e "s|SHARED_DIR|$shared|" \
    hack/kind/cluster.yaml \
    >"$state/cluster.yaml"
  kind create cluster --name "$name" --image "$node_image" --config "$state/cluster.yaml" \
    --kubeconfig "$kubeconfig" --wait 5m
}

# A node's resolv.conf names Docker's embedded DNS (127.0.0.11), which CoreDNS, in its own network namespace, would
# reach as itself (its loop check stops it). CoreDNS forwards to this machine's resolvers instead.
coredns_upstream() {
  local resolv=/etc/resolv.conf upstream
  grep -q '^nameserver 127\.' $resolv && [ -f /run/systemd/resolve/resolv.conf ] && resolv=/run/systemd/resolve/resolv.conf
  upstream=$(awk '/^nameserver/ && $2 !~ /^127\./ {printf "%s ", $2}' $resolv)
  [ -n "$upstream" ] || { log "no non-loopback resolver in $resolv: CoreDNS keeps its default"; return; }
  kubectl -n kube-system get configmap coredns -o json |
    jq --arg upstream "$upstream" '.data.Corefile |= sub("forward \\. /etc/resolv.conf"; "forward . " + $upstream)' |
    kubectl apply -f - >/dev/null
  kubectl -n kube-system rollout restart deployment/coredns >/dev/null
  kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null
}

label_workers() {  # two leaves under one spine: the topology a 3-server SuperPOD slice has
  local index=0 worker
  for worker in $(kubectl get nodes -o name -l '!node-role.kubernetes.io/control-plane'); do
    kubectl label --overwrite "$worker" nvidia.com/gpu.present=true nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 \
      "nvidia.com/gpu.count=$gpus_per_worker" nvidia.com/mig.capable=false superpod.dev/spine=spine-0 \
      "superpod.dev/leaf=leaf-$((index / 2))" >/dev/null
    index=$((index + 1))
  done
}

# Tagged also by content, so the chart and the device plugin roll when the image changes.
operator_image() {
  python_base
  docker build --quiet --file operator/Dockerfile --tag "$operator_image" . >/dev/null
  build_tag=dev-$(docker image inspect -f '{{.Id}}' "$operator_image" | cut -d: -f2 | cut -c1-12)
  docker tag "$operator_image" "superpod-scheduler:$build_tag"
  docker images superpod-scheduler --format '{{.Repository}}:{{.Tag}}' | { grep -E ':dev-' || true; } |
    { grep -vx "superpod-scheduler:$build_tag" || true; } | xargs -r docker rmi >/dev/null 2>&1 || true
  kind load docker-image "$operator_image" "superpod-scheduler:$build_tag" --name "$name" >/dev/null
}

device_plugin() {
  sed -e "s|OPERATOR_IMAGE|superpod-scheduler:$build_tag|" -e "s|GPUS_PER_WORKER|$gpus_per_worker|" \
    hack/kind/device-plugin.yaml | kubectl apply -f - >/dev/null
  kubectl -n kube-system rollout status daemonset/superpod-sim-device-plugin --timeout=120s >/dev/null
  local advertised
  for _ in $(seq 60); do
    advertised=$(kubectl get nodes -l nvidia.com/gpu.present=true \
      -o jsonpath='{range .items[*]}{.status.allocatable.nvidia\.com/gpu}{"\n"}{end}' | sort -u || true)
    [ "$advertised" = "$gpus_per_worker" ] && return
    sleep 1
  done
  log "the workers do not all advertise $gpus_per_worker nvidia.com/gpu: ${advertised:-none}"; return 1
}

install_chart() {
  helm upgrade --install superpod-scheduler charts/superpod-scheduler -n superpod-system --create-namespace \
    --set image.tag="$build_tag" --set image.pullPolicy=Never --set topology.create=true \
    --set notReadyGraceSeconds=10 --set 'tenantPolicy.exemptNamespaces={gpu-operator,dra-example-driver}' \
    --wait --timeout 3m >/dev/null  # a stopped worker's gangs act within a minute; the DRA driver's node agents
    # (system-node-critical) are the cluster's, not a tenant's
}

step "node image $node_image" true
step "kind cluster up (1 control plane, 3 workers)" create
step "CoreDNS forwarding to this machine's resolvers" coredns_upstream
step "workers labelled" label_workers
step "operator image built and loaded" operator_image
step "simulated device plugin advertising $gpus_per_worker GPUs per worker" device_plugin
step "chart installed" install_chart
echo "export KUBECONFIG=$kubeconfig DOCKER_HOST=$DOCKER_HOST KIND_CLUSTER_NAME=$name SUPERPOD_OPERATOR_IMAGE=$operator_image SUPERPOD_KIND_SHARED=$shared"
