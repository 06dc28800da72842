#!/usr/bin/env bash
# A private Docker engine for kind: Debian's docker.io (installed when missing), its own data, exec root, socket and
# runtime wrapper under one state folder. Nothing global is configured: no /etc/docker, no /var/lib/docker, no
# service; the engine's bridge networks and their iptables rules exist only while it runs.
#   hack/docker.sh up     start it (does nothing when it answers); prints `export DOCKER_HOST=...`
#   hack/docker.sh down   stop it and its containers
#   hack/docker.sh env    print `export DOCKER_HOST=...`
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=${SUPERPOD_DOCKER_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/superpod/docker}
socket="$state/docker.sock"
export DOCKER_HOST="unix://$socket"

log() { printf '[docker %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
answers() { docker version >/dev/null 2>&1; }

install() {  # also what hack/kind/ builds images with: jq (runc wrapper), mmdebstrap (Debian root filesystems)
  command -v dockerd >/dev/null && command -v jq >/dev/null && command -v mmdebstrap >/dev/null && return
  log "installing Debian's docker.io, jq and mmdebstrap"
  local started=$SECONDS
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io jq mmdebstrap >"$state/apt.log" 2>&1 ||
    { tail -20 "$state/apt.log" >&2; exit 1; }
  log "installed in $((SECONDS - started))s"
}

up() {
  mkdir -p "$state"
  answers && { log "running: $DOCKER_HOST"; return; }
  install
  cp "$here/kind/runc-wrapper" "$state/runc-wrapper"
  local started=$SECONDS
  # The engine's own containerd is started by dockerd under the exec root; the runtime wrapper drops
  # CAP_SYS_RESOURCE, which this machine's capability bounding set lacks (see kind/runc-wrapper).
  nohup dockerd --data-root "$state/data" --exec-root "$state/exec" --pidfile "$state/dockerd.pid" \
    --host "$DOCKER_HOST" --add-runtime "superpod-runc=$state/runc-wrapper" --default-runtime superpod-runc \
    --storage-driver overlay2 >"$state/dockerd.log" 2>&1 &
  for _ in $(seq 120); do
    answers && { log "started in $((SECONDS - started))s: $DOCKER_HOST (log $state/dockerd.log)"; return; }
    kill -0 $! 2>/dev/null || { tail -20 "$state/dockerd.log" >&2; exit 1; }
    sleep 0.5
  done
  log "dockerd did not answer in 60 s"; tail -20 "$state/dockerd.log" >&2; exit 1
}

down() {
  [ -f "$state/dockerd.pid" ] || return 0
  local pid; pid=$(cat "$state/dockerd.pid")
  answers && { docker ps -q | xargs -r docker kill >/dev/null 2>&1 || true; }
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
  log "stopped"
}

case "${1:-up}" in
  up) up; echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  down) down ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
