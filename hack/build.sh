#!/usr/bin/env bash
# Builds the real control-plane components from their Go modules into a cache outside the repo, keyed by version:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes), etcd, kwok, helm, and
#   the JobSet, Kubeflow Trainer (v2) and Training Operator (v1) controllers (their CRDs and webhook configurations
#   in <name>-config/, with the coscheduling PodGroup CRD);
#   with --kind also what a kind node runs: kubelet, kubeadm, kube-proxy, crictl, coredns, containerd (in kind-node/,
#   off PATH: the host's Docker engine runs its own), the DRA example driver's kubelet plugin, and kind itself;
#   with --kueue also Kueue, the peer the fleet benchmark compares with (its CRDs and webhooks in kueue-config/);
#   with --control-plane only what the local control plane runs (the Kubernetes components, etcd, kwok): the demo.
# A second run with the same versions does nothing. Prints the folder with the binaries on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${SUPERPOD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/superpod}
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
bin="$cache/$key/bin"
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
tools=(etcd kwok)
for_tests=(helm jobset trainer training-operator)  # what the tests run besides the control plane
for flag in "$@"; do
  case $flag in
    --kind) k8s_bins+=(kubelet kubeadm kube-proxy); tools+=(coredns kind crictl containerd dra-example-kubeletplugin) ;;
    --kueue) tools+=(kueue) ;;
    --control-plane) for_tests=() ;;
    *) echo "build.sh: unknown flag $flag (--kind, --kueue, --control-plane)" >&2; exit 2 ;;
  esac
done
tools+=("${for_tests[@]}")
all=("${k8s_bins[@]}" "${tools[@]}")

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
declare -A tool_version=([kwok]=$KWOK_VERSION [helm]=$HELM_VERSION [jobset]=$JOBSET_VERSION [trainer]=$TRAINER_VERSION
  [training-operator]=$TRAINING_OPERATOR_VERSION [kueue]=${KUEUE_VERSION:-} [coredns]=${COREDNS_VERSION:-}
  [kind]=${KIND_VERSION:-} [crictl]=${CRICTL_VERSION:-} [containerd]=${CONTAINERD_VERSION:-}
  [dra-example-kubeletplugin]=${DRA_EXAMPLE_DRIVER_VERSION:-})
declare -A tool_file=([containerd]=kind-node/containerd)  # where a tool is when not $bin/<name>
have_all() {
  local b
  for b in "${all[@]}"; do [ -x "$bin/${tool_file[$b]:-$b}" ] || return 1; done
  [[ " ${tools[*]} " != *" kueue "* ]] || [ -d "$bin/kueue-config" ] || return 1
  for b in "${tools[@]}"; do  # a tool built before its version was recorded counts as current
    [ -z "${tool_version[$b]:-}" ] || [ "$(cat "$bin/.$b.version" 2>/dev/null || echo "${tool_version[$b]}")" = "${tool_version[$b]}" ] ||
      return 1
  done
}

if have_all; then
  log "cached: $bin"
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { log "Go is not installed: it is needed to build the components"; exit 3; }
mkdir -p "$bin"
# One build at a time per cache: the test command builds what the later tests run in the background while the first
# ones run (hack/test.sh), and a build.sh started meanwhile waits for it, then finds the binaries there.
exec 9>"$cache/$key.lock"
if ! flock -n 9; then
  log "waiting for the build.sh already running"
  flock 9
  if have_all; then log "cached: $bin"; echo "$bin"; exit 0; fi
fi
work="$cache/$key/src"
mkdir -p "$work"
export GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath" CGO_ENABLED=0

# Kubernetes and etcd share one wrapper module: k8s.io/kubernetes replaces its ~33 staging modules with
# directories that are not in its module zip, so the wrapper replaces each with the published v0.X.Y.
build_k8s() {
  local w="$work/k8s" minor=${K8S_VERSION#v1.} staging
  minor=${minor%%.*}
  mkdir -p "$w"
  go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" >"$w/download.json"
  local mod_dir
  mod_dir=$(sed -n 's/.*"Dir": "\(.*\)",/\1/p' "$w/download.json")
  staging=$(grep -E '=> \./staging/' "$mod_dir/go.mod" | awk '{print $1}')
  {
    echo "module superpod.dev/hack/k8s"
    echo
    echo "go 1.26"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes ${K8S_VERSION}"
    echo "	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
    echo ")"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m v0.${minor}.${K8S_VERSION##*.}"; done
    echo ")"
  } >"$w/go.mod"
  cat >"$w/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  log "resolving modules for Kubernetes ${K8S_VERSION} ($(echo "$staging" | wc -w) staging modules replaced by v0.${minor}.${K8S_VERSION##*.})"
  (cd "$w" && go mod tidy -e >/dev/null 2>"$w/tidy.log" || { cat "$w/tidy.log" >&2; exit 1; })
  local ver=${K8S_VERSION} ld=""
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X '$pkg.gitVersion=$ver' -X '$pkg.gitMajor=1' -X '$pkg.gitMinor=$minor'"
    ld+=" -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)'"
  done
  for b in "${k8s_bins[@]}"; do
    [ -x "$bin/$b" ] && { log "have $b"; continue; }
    log "building $b ${K8S_VERSION} (a few minutes each on 2 cores)"
    (cd "$w" && go build -ldflags "-s -w $ld" -o "$bin/$b.tmp" "k8s.io/kubernetes/cmd/$b") && mv "$bin/$b.tmp" "$bin/$b"
  done
  if [ ! -x "$bin/etcd" ]; then
    log "building etcd ${ETCD_VERSION}"
    (cd "$w" && go build -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3) && mv "$bin/etcd.tmp" "$bin/etcd"
  fi
}

# kwok and helm carry no replace directives, so `go install pkg@version` builds them as published.
# The version each was built at is kept beside it (.name.version), so a version bump rebuilds only that tool.
install_tool() {
  local name=$1 pkg=$2 ver=$3
  [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.version" 2>/dev/null || echo "$ver")" = "$ver" ] &&
    { log "have $name"; return; }
  log "building $name $ver"
  GOBIN="$work/gobin" go install -ldflags "-s -w" "$pkg@$ver"
  mv "$work/gobin/$name" "$bin/$name"
  echo "$ver" >"$bin/.$name.version"
}

# JobSet, Kubeflow's controllers and the DRA example driver: `go install module@version` fails only because the
# proxy refuses their version lists; a wrapper module that requires the exact version builds them. Their CRDs and
# webhook configurations come from the same modules (the Trainer's coscheduling PodGroup CRD from the
# scheduler-plugins version it requires), copied before anything is compiled: the integration tests read them first.
# wrapped_configs <name> <module> <version> <package> then the files to copy into <name>-config/, relative to a
# module's folder as "<module>:<path>"; build_wrapped <name> <module> <version> <package>: the binary.
wrapped_configs() {
  local name=$1 module=$2 version=$3 pkg=$4 w="$work/$1" entry dir
  shift 4
  [ "$(cat "$bin/$name-config/.version" 2>/dev/null)" = "$version" ] && return
  wrapper_module "$w" "$module" "$version" "$pkg"
  mkdir -p "$bin/$name-config"
  for entry in "$@"; do
    dir=$(cd "$w" && go list -m -f '{{.Dir}}' "${entry%%:*}")
    install -m 0644 "$dir/${entry#*:}" "$bin/$name-config/"
  done
  echo "$version" >"$bin/$name-config/.version"
}
build_wrapped() {
  local name=$1 module=$2 version=$3 pkg=$4 w="$work/$1"
  [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.version" 2>/dev/null)" = "$version" ] && { log "have $name"; return; }
  log "building $name $version"
  grep -qs "require $module $version\$" "$w/go.mod" || wrapper_module "$w" "$module" "$version" "$pkg"
  (cd "$w" && go build -ldflags "-s -w" -o "$bin/$name.tmp" "$pkg") && mv "$bin/$name.tmp" "$bin/$name"
  echo "$version" >"$bin/.$name.version"
}

# wrapper_module <folder> <module> <version> <package>...: a module that requires exactly <module>@<version> and
# imports the packages, its requirements resolved.
wrapper_module() {
  local w=$1 module=$2 version=$3 pkg
  shift 3
  mkdir -p "$w"
  printf 'module superpod.dev/hack/%s\n\ngo 1.26\n\nrequire %s %s\n' "${w##*/}" "$module" "$version" >"$w/go.mod"
  { printf '//go:build tools\n\npackage tools\n\nimport (\n'; for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
    printf ')\n'; } >"$w/tools.go"
  (cd "$w" && go mod tidy -e >/dev/null 2>"$w/tidy.log") || { cat "$w/tidy.log" >&2; exit 1; }
}

# containerd 2 for the kind node (Debian bookworm's 1.6 has no CDI, which DRA drivers hand devices to containers
# through), with its runc shim and ctr, as kind builds it: without the snapshotters a node never selects.
build_containerd() {
  local module=github.com/containerd/containerd/v2 w="$work/containerd" name
  local version="-X $module/version.Version=$CONTAINERD_VERSION"
  [ -x "$bin/kind-node/containerd" ] && [ "$(cat "$bin/.containerd.version" 2>/dev/null)" = "$CONTAINERD_VERSION" ] &&
    { log "have containerd"; return; }
  log "building containerd $CONTAINERD_VERSION"
  wrapper_module "$w" "$module" "$CONTAINERD_VERSION" "$module/cmd/containerd" "$module/cmd/containerd-shim-runc-v2" \
    "$module/cmd/ctr"
  mkdir -p "$bin/kind-node"
  for name in containerd containerd-shim-runc-v2 ctr; do
    (cd "$w" && go build -tags "no_btrfs no_zfs no_devmapper no_aufs" -ldflags "-s -w $version" \
      -o "$bin/kind-node/$name.tmp" "$module/cmd/$name") && mv "$bin/kind-node/$name.tmp" "$bin/kind-node/$name"
  done
  echo "$CONTAINERD_VERSION" >"$bin/.containerd.version"
}

start=$(date +%s)
wants() { [[ " ${tools[*]} " == *" $1 "* ]]; }
trainer=github.com/kubeflow/trainer/v2
operator_v1=github.com/kubeflow/training-operator
wants jobset && wrapped_configs jobset sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset \
  sigs.k8s.io/jobset:config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml \
  sigs.k8s.io/jobset:config/components/webhook/manifests.yaml
wants trainer && wrapped_configs trainer "$trainer" "$TRAINER_VERSION" "$trainer/cmd/trainer-controller-manager" \
  "$trainer:manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml" \
  "$trainer:manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml" \
  "$trainer:manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml" \
  "$trainer:manifests/base/webhook/manifests.yaml" \
  sigs.k8s.io/scheduler-plugins:config/crd/bases/scheduling.x-k8s.io_podgroups.yaml
wants training-operator && wrapped_configs training-operator "$operator_v1" "$TRAINING_OPERATOR_VERSION" \
  "$operator_v1/cmd/training-operator.v1" "$operator_v1:manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
build_k8s
wants jobset && build_wrapped jobset sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset
wants trainer && build_wrapped trainer "$trainer" "$TRAINER_VERSION" "$trainer/cmd/trainer-controller-manager"
wants training-operator && build_wrapped training-operator "$operator_v1" "$TRAINING_OPERATOR_VERSION" \
  "$operator_v1/cmd/training-operator.v1"
install_tool kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
wants helm && install_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
if wants kueue; then  # served by the proxy: go install builds it as published
  install_tool kueue sigs.k8s.io/kueue/cmd/kueue "$KUEUE_VERSION"
  kueue_dir=$(go env GOMODCACHE)/sigs.k8s.io/kueue@$KUEUE_VERSION
  mkdir -p "$bin/kueue-config"
  install -m 0644 "$kueue_dir"/config/components/crd/bases/*.yaml "$kueue_dir/config/components/webhook/manifests.yaml" \
    "$bin/kueue-config/"
fi
if wants kind; then
  install_tool coredns github.com/coredns/coredns "$COREDNS_VERSION"
  install_tool kind sigs.k8s.io/kind "$KIND_VERSION"
  install_tool crictl sigs.k8s.io/cri-tools/cmd/crictl "$CRICTL_VERSION"
  build_containerd
  build_wrapped dra-example-kubeletplugin sigs.k8s.io/dra-example-driver "$DRA_EXAMPLE_DRIVER_VERSION" \
    sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin
fi
have_all || { log "some binaries are missing in $bin"; exit 1; }
log "built in $(( $(date +%s) - start ))s; cache size $(du -sh "$cache/$key" | cut -f1) (binaries $(du -sh "$bin" | cut -f1))"
for b in "${all[@]}"; do log "  $bin/${tool_file[$b]:-$b}"; done
echo "$bin"
