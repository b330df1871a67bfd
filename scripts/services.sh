#!/usr/bin/env bash
# Starts and stops the servers the integration tests talk to: redis-server and memcached, on
# 127.0.0.1 only, on non-default ports, with their data, logs and PID files in one state
# directory. Installs nothing (scripts/install-deps.sh does, from scripts/packages.txt); it only
# checks that the binaries exist.
#
#   scripts/services.sh start   start what is not running yet, wait until each answers, write
#                               $LOCKSMITH_SERVICES_DIR/env (export lines for the tests)
#   scripts/services.sh stop    stop what `start` started, by PID; safe when nothing runs
#   scripts/services.sh env     print the export lines (source them: eval "$(... env)")
#   scripts/services.sh status  one line per service
#
# Environment: LOCKSMITH_SERVICES_DIR (default /tmp/locksmith-services), LOCKSMITH_REDIS_PORT
# (16379), LOCKSMITH_MEMCACHED_PORT (21211), LOCKSMITH_SERVICES (default "redis memcached").
# A port held by a process we did not start is reported and left alone.
set -euo pipefail

state_dir=${LOCKSMITH_SERVICES_DIR:-/tmp/locksmith-services}
redis_port=${LOCKSMITH_REDIS_PORT:-16379}
memcached_port=${LOCKSMITH_MEMCACHED_PORT:-21211}
services=${LOCKSMITH_SERVICES:-redis memcached}
# Servers live in /usr/sbin or /usr/bin depending on the package; a non-root PATH may lack sbin.
PATH=$PATH:/usr/sbin:/sbin

log() { echo "services: $*" >&2; }

# A PID counts as running only when it is alive, not a zombie (detached servers are reaped late
# by PID 1), and runs the expected program.
alive() {
  local pid=$1 comm=$2 stat
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  stat=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$stat" != Z ] || return 1
  grep -q "^$comm" "/proc/$pid/comm" 2>/dev/null
}

pid_of() { cat "$state_dir/$1.pid" 2>/dev/null || true; }

redis_ping() {
  redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null | grep -q PONG
}

# memcached has no client in the required packages: talk to it over bash's /dev/tcp. The exec is
# inside braces so that its redirection does not swallow this script's stderr.
memcached_ping() {
  local reply=""
  { exec 3<>"/dev/tcp/127.0.0.1/$memcached_port"; } 2>/dev/null || return 1
  printf 'version\r\n' >&3
  read -r -t 2 reply <&3 || true
  exec 3<&- 3>&-
  [[ $reply == VERSION* ]]
}

port_busy() {
  { exec 4<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  exec 4<&- 4>&-
  return 0
}

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  log "$1 not found; install it with scripts/install-deps.sh (package $2)"
  return 1
}

# start_one NAME COMM PROBE PORT CMD...: starts CMD detached unless our instance answers already.
start_one() {
  local name=$1 comm=$2 probe=$3 port=$4
  shift 4
  local pid
  pid=$(pid_of "$name")
  if alive "$pid" "$comm" && $probe; then
    log "$name already running (pid $pid, port $port)"
    return 0
  fi
  if port_busy "$port"; then
    log "$name: port $port is in use by a process this script did not start; not touching it"
    return 1
  fi
  mkdir -p "$state_dir/$name"
  setsid "$@" </dev/null >>"$state_dir/$name.log" 2>&1 &
  pid=$!
  echo "$pid" >"$state_dir/$name.pid"
  local i
  for i in $(seq 1 100); do
    if ! alive "$pid" "$comm"; then
      log "$name died at start; last log lines:"
      tail -n 20 "$state_dir/$name.log" >&2 || true
      rm -f "$state_dir/$name.pid"
      return 1
    fi
    if $probe; then
      log "$name ready (pid $pid, 127.0.0.1:$port)"
      return 0
    fi
    sleep 0.1
  done
  log "$name did not answer within 10 s; last log lines:"
  tail -n 20 "$state_dir/$name.log" >&2 || true
  return 1
}

stop_one() {
  local name=$1 comm=$2 pid i
  pid=$(pid_of "$name")
  if alive "$pid" "$comm"; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
      alive "$pid" "$comm" || break
      sleep 0.1
    done
    if alive "$pid" "$comm"; then
      log "$name (pid $pid) ignored SIGTERM for 5 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "$name stopped (pid $pid)"
  fi
  rm -f "$state_dir/$name.pid"
}

env_lines() {
  local s
  for s in $services; do
    case $s in
      redis) echo "export LOCKSMITH_TEST_REDIS_URL=redis://127.0.0.1:$redis_port/0" ;;
      memcached) echo "export LOCKSMITH_TEST_MEMCACHED=127.0.0.1:$memcached_port" ;;
    esac
  done
  echo "export LOCKSMITH_SERVICES_DIR=$state_dir"
}

start() {
  mkdir -p "$state_dir"
  chmod 700 "$state_dir"
  local s rc=0 user_args=()
  # memcached refuses to run as root without -u.
  [ "$(id -u)" -ne 0 ] || user_args=(-u "$(id -un)")
  for s in $services; do
    case $s in
      redis)
        need redis-server redis-server && need redis-cli redis-tools || { rc=1; continue; }
        start_one redis redis-server redis_ping "$redis_port" \
          redis-server --bind 127.0.0.1 --port "$redis_port" --protected-mode yes \
          --daemonize no --dir "$state_dir/redis" --save '' --appendonly no || rc=1
        ;;
      memcached)
        need memcached memcached || { rc=1; continue; }
        start_one memcached memcached memcached_ping "$memcached_port" \
          memcached -l 127.0.0.1 -p "$memcached_port" -U 0 -m 64 -c 4096 "${user_args[@]}" || rc=1
        ;;
      *) log "unknown service '$s'"; rc=1 ;;
    esac
  done
  env_lines >"$state_dir/env"
  return $rc
}

stop() {
  [ -d "$state_dir" ] || return 0
  local s
  for s in $services; do
    case $s in
      redis) stop_one redis redis-server ;;
      memcached) stop_one memcached memcached ;;
    esac
  done
}

status() {
  local s pid
  for s in $services; do
    case $s in
      redis) pid=$(pid_of redis); alive "$pid" redis-server && redis_ping &&
        echo "redis: running (pid $pid, port $redis_port)" || echo "redis: not running" ;;
      memcached) pid=$(pid_of memcached); alive "$pid" memcached && memcached_ping &&
        echo "memcached: running (pid $pid, port $memcached_port)" || echo "memcached: not running" ;;
    esac
  done
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  env) env_lines ;;
  status) status ;;
  *) echo "usage: $0 start|stop|env|status" >&2; exit 2 ;;
esac
