#!/usr/bin/env bash
# A private Docker engine for kind: Debian's docker.io (installed when missing), its own data, exec root, socket,
# daemon configuration and runtime wrapper under one state folder; nothing in /etc/docker or /var/lib/docker, no
# service. What an engine must change in the host's network — its bridges, its iptables chains and rules, the FORWARD
# policy, IP forwarding — is recorded before the first start and put back by `down`.
#   hack/docker.sh up     start it (does nothing when it answers); prints `export DOCKER_HOST=...`
#   hack/docker.sh down   stop it and its containers, put the host's network back
#   hack/docker.sh env    print `export DOCKER_HOST=...`
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=${SUPERPOD_DOCKER_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/superpod/docker}
socket="$state/docker.sock"
export DOCKER_HOST="unix://$socket"

log() { printf '[docker %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
answers() { docker version >/dev/null 2>&1; }
is_ours() { [ -n "$1" ] && [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$(command -v dockerd)" ]; }  # not a reused pid

install() {  # also what hack/kind/ builds images with: jq (runc wrapper), mmdebstrap (Debian root filesystems)
  command -v dockerd >/dev/null && command -v jq >/dev/null && command -v mmdebstrap >/dev/null && return
  log "installing Debian's docker.io, jq and mmdebstrap"
  local started=$SECONDS
  local packages=(docker.io jq mmdebstrap gcc libc6-dev)  # gcc, libc6-dev: the static pause binary
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}" >"$state/apt.log" 2>&1 ||
    { apt-get update -q >>"$state/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}" >>"$state/apt.log" 2>&1; } ||
    { tail -20 "$state/apt.log" >&2; exit 1; }
  log "installed in $((SECONDS - started))s"
}

up() {
  mkdir -p "$state"
  answers && { log "running: $DOCKER_HOST"; return; }
  install
  cp "$here/kind/runc-wrapper" "$state/runc-wrapper"
  echo "{\"deprecated-key-path\": \"$state/key.json\"}" >"$state/daemon.json"  # else /etc/docker/key.json
  is_ours "$(cat "$state/dockerd.pid" 2>/dev/null)" || rm -f "$state/dockerd.pid"  # left by a killed engine
  record_network
  local started=$SECONDS
  # The engine's own containerd is started by dockerd under the exec root; the runtime wrapper drops
  # CAP_SYS_RESOURCE, which this machine's capability bounding set lacks (see kind/runc-wrapper).
  nohup dockerd --config-file "$state/daemon.json" --data-root "$state/data" --exec-root "$state/exec" \
    --pidfile "$state/dockerd.pid" \
    --host "$DOCKER_HOST" --add-runtime "superpod-runc=$state/runc-wrapper" --default-runtime superpod-runc \
    --storage-driver overlay2 >"$state/dockerd.log" 2>&1 &
  for _ in $(seq 120); do
    answers && { log "started in $((SECONDS - started))s: $DOCKER_HOST (log $state/dockerd.log)"; return; }
    kill -0 $! 2>/dev/null || { tail -20 "$state/dockerd.log" >&2; exit 1; }
    sleep 0.5
  done
  log "dockerd did not answer in 60 s"; tail -20 "$state/dockerd.log" >&2; exit 1
}

# The host's network as it was before the first start (kept across runs: a later record would see the engine's).
record_network() {
  [ -f "$state/network.before" ] && return
  { echo "forward_policy=$(iptables -S FORWARD | awk '$1 == "-P" {print $3}')"
    echo "ip_forward=$(sysctl -n net.ipv4.ip_forward)"
    echo "bridges='$(ip -o link show type bridge | awk -F': ' '{printf "%s ", $2}')'"
  } >"$state/network.before"
}

restore_network() {
  [ -f "$state/network.before" ] || return 0
  local forward_policy ip_forward bridges bridge table
  eval "$(cat "$state/network.before")"
  for bridge in $(ip -o link show type bridge | awk -F': ' '{print $2}'); do
    [[ " $bridges " == *" $bridge "* ]] || [[ ! $bridge =~ ^(docker0|br-[0-9a-f]{12})$ ]] || ip link delete "$bridge"
  done
  for table in filter nat; do  # the engine's chains and every rule that names them or its bridges
    iptables-save -t "$table" | grep -v -E 'DOCKER|docker0|br-[0-9a-f]{12}' | iptables-restore
  done
  iptables -P FORWARD "$forward_policy"
  sysctl -qw net.ipv4.ip_forward="$ip_forward"
  log "host network put back (FORWARD $forward_policy, ip_forward $ip_forward)"
}

down() {
  if [ -f "$state/dockerd.pid" ]; then
    local pid; pid=$(cat "$state/dockerd.pid")
    answers && { docker ps -q | xargs -r docker kill >/dev/null 2>&1 || true; }
    if is_ours "$pid"; then
      kill "$pid"
      for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$state/dockerd.pid"
    log "stopped"
  fi
  restore_network
}

case "${1:-up}" in
  up) up; echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  down) down ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
