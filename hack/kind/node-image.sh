#!/usr/bin/env bash
# Builds a kind node image for K8S_VERSION with no registry: Debian packages (mmdebstrap) for the node's operating
# system, runc and CNI plugins; the Kubernetes binaries and containerd hack/build.sh --kind builds from Go modules;
# and every image the cluster runs (pause, etcd, kube-*, CoreDNS, the pod network agent, the DRA example driver),
# built here and imported by each node at boot. Cached by a key of the versions and of the files that go into it: a
# second run prints the tag and does nothing else.
# Needs DOCKER_HOST from hack/docker.sh. Prints the node image's tag on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../versions.env"
log() { printf '[node-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
has_image() { docker image inspect "$1" >/dev/null 2>&1; }

image_files=(runc-wrapper entrypoint containerd.toml containerd.service kubelet.service kubelet.slice
  superpod-images.service network.yaml pause.c node-image.sh)
key=$(cd "$here" && { grep -E '^(K8S|ETCD|COREDNS|CRICTL|PAUSE|CONTAINERD|DRA_EXAMPLE_DRIVER)_VERSION=' ../versions.env
  cat "${image_files[@]}"; } | sha256sum | cut -c1-10)
node_tag="superpod.local/kind-node:${K8S_VERSION}-$key"
if has_image "$node_tag"; then log "cached: $node_tag"; echo "$node_tag"; exit 0; fi

started=$SECONDS
bin=$(bash "$here/../build.sh" --kind | tail -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
suite=bookworm

# A root filesystem from Debian packages, imported as an image tagged by its package list (mmdebstrap is the
# slow step). Prints the tag.
debian_image() {  # $1 name, $2 variant, $3 packages
  local tag; tag="superpod.local/$1:$suite-$(echo "$2 $3" | sha256sum | cut -c1-8)"
  if ! has_image "$tag"; then
    log "building $tag from Debian $suite packages ($3)"
    mmdebstrap --quiet --variant="$2" --include="$3" "--dpkgopt=path-exclude=/usr/share/doc/*" \
      "--dpkgopt=path-exclude=/usr/share/man/*" "--dpkgopt=path-exclude=/usr/share/locale/*" \
      "$suite" "$work/rootfs.tar"
    docker import "$work/rootfs.tar" "$tag" >/dev/null
    rm -f "$work/rootfs.tar"
  fi
  echo "$tag"
}
node_os=$(debian_image debian-node apt systemd,systemd-sysv,dbus,runc,containernetworking-plugins,iptables,iproute2,conntrack,ethtool,socat,ebtables,kmod,mount,util-linux,procps,ca-certificates,jq)
net_os=$(debian_image debian-net minbase iptables,iproute2,conntrack,ca-certificates)

# Images from a Dockerfile given on stdin, in a context holding the named files; each joins `images`, the ones the
# nodes import.
images=()
build() {  # $1 tag, then files for the context
  local tag=$1 context="$work/context"; shift
  rm -rf "$context" && mkdir -p "$context" && cp "$@" "$context/"
  docker build --quiet --tag "$tag" --file - "$context" >/dev/null
  images+=("$tag")
}
static_image() {  # $1 tag, $2 binary, $3 entrypoint or ""
  local name; name=$(basename "$2")
  build "$1" "$2" < <(printf 'FROM scratch\nCOPY %s /usr/local/bin/%s\nENV PATH=/usr/local/bin\n%s\n' \
    "$name" "$name" "${3:+ENTRYPOINT [\"$3\"]}")  # not a pipe: `build` must run in this shell to add to `images`
}

mkdir -p "$work/images"
gcc -static -Os -o "$work/pause" "$here/pause.c"
static_image "registry.k8s.io/pause:$PAUSE_VERSION" "$work/pause" /usr/local/bin/pause
static_image "registry.k8s.io/etcd:${ETCD_VERSION#v}-0" "$bin/etcd" ""
for component in kube-apiserver kube-controller-manager kube-scheduler; do
  static_image "registry.k8s.io/$component:$K8S_VERSION" "$bin/$component" ""
done
static_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$bin/coredns" /usr/local/bin/coredns
static_image "superpod.local/dra-example-driver:$DRA_EXAMPLE_DRIVER_VERSION" "$bin/dra-example-kubeletplugin" \
  /usr/local/bin/dra-example-kubeletplugin
build "registry.k8s.io/kube-proxy:$K8S_VERSION" "$bin/kube-proxy" < <(printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/\n' "$net_os")
build superpod.local/kind-network:latest "$bin/kubectl" < <(printf 'FROM %s\nCOPY kubectl /usr/local/bin/\n' "$net_os")
for image in "${images[@]}"; do
  docker save "$image" -o "$work/images/$(echo "$image" | tr '/:' '__').tar"
done
log "component images: ${#images[@]} ($(du -sh "$work/images" | cut -f1))"

context="$work/node"
mkdir -p "$context"
cp "$bin/kubelet" "$bin/kubeadm" "$bin/kubectl" "$bin/crictl" "$bin"/kind-node/* "$here"/{runc-wrapper,entrypoint} \
  "$context/"
sed "s/PAUSE_VERSION/$PAUSE_VERSION/" "$here/containerd.toml" >"$context/containerd.toml"
cp "$here"/{containerd.service,kubelet.service,kubelet.slice,superpod-images.service,network.yaml} "$context/"
mv "$work/images" "$context/images"
cat >"$context/Dockerfile" <<DOCKERFILE
FROM $node_os
COPY kubelet kubeadm kubectl crictl containerd containerd-shim-runc-v2 ctr entrypoint /usr/local/bin/
COPY runc-wrapper /usr/local/sbin/runc
COPY containerd.toml /etc/containerd/config.toml
COPY containerd.service kubelet.service kubelet.slice superpod-images.service /etc/systemd/system/
COPY network.yaml /kind/manifests/default-cni.yaml
COPY images/ /kind/images/
RUN echo "$K8S_VERSION" >/kind/version \
 && echo "runtime-endpoint: unix:///run/containerd/containerd.sock" >/etc/crictl.yaml && mkdir -p /etc/cni/net.d /var/lib/kubelet /etc/kubernetes/manifests \
 && systemctl enable containerd superpod-images kubelet \
 && systemctl mask getty@tty1.service console-getty.service systemd-udevd.service systemd-udev-trigger.service \
      systemd-modules-load.service sys-kernel-debug.mount sys-kernel-tracing.mount
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
DOCKERFILE
docker build --quiet --tag "$node_tag" "$context" >/dev/null
# Earlier builds of the node image are only disk now (one a kept cluster still runs is refused: left for later).
docker images superpod.local/kind-node --format '{{.Repository}}:{{.Tag}}' | { grep -vx "$node_tag" || true; } |
  xargs -r docker rmi >/dev/null 2>&1 || true
log "built $node_tag in $((SECONDS - started))s ($(docker image inspect -f '{{.Size}}' "$node_tag" | numfmt --to=iec))"
echo "$node_tag"
