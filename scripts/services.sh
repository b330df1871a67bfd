#!/usr/bin/env bash
# Starts and stops the servers the integration tests talk to: redis-server, memcached,
# PostgreSQL, MariaDB, ZooKeeper (one standalone server, and an ensemble of three), etcd and three
# more redis-servers (members of the `combined` strategy's quorum), on 127.0.0.1 only, on non-default ports, with their data, logs and PID
# files in one state directory. Test settings only: PostgreSQL trusts every local connection and
# runs with fsync off; MariaDB has a `locktest` user whose password is in the env lines. Installs nothing (scripts/install-deps.sh does, from scripts/packages-servers.txt); it only
# checks that the binaries exist.
#
#   scripts/services.sh start   start what is not running yet, wait until each answers, write
#                               $LOCKSMITH_SERVICES_DIR/env (export lines for the tests)
#   scripts/services.sh stop    stop what `start` started, by PID; safe when nothing runs
#   scripts/services.sh env     print the export lines (source them: eval "$(... env)")
#   scripts/services.sh status  one line per service
#
# Environment: LOCKSMITH_SERVICES_DIR (default /tmp/locksmith-services), LOCKSMITH_REDIS_PORT
# (16379), LOCKSMITH_MEMCACHED_PORT (21211), LOCKSMITH_POSTGRES_PORT (15432),
# LOCKSMITH_MARIADB_PORT (13306), LOCKSMITH_ZOOKEEPER_PORT (12181), LOCKSMITH_ETCD_PORT (12379;
# its peer port is the next one), LOCKSMITH_REDIS_QUORUM_PORT (16380; the three members use it
# and the next two), LOCKSMITH_ZOOKEEPER_ENSEMBLE_PORT (12281: the client ports of the three
# members are it and the next two, their quorum ports the next three, their election ports the
# three after), LOCKSMITH_SERVICES (default: all, "certs redis memcached postgres mariadb
# zookeeper zookeeper-ensemble etcd redis-quorum"; `certs` makes the test certificates the TLS
# servers use).
# Ensemble members are zookeeper-ensemble-1..3 (myid 1..3); their PIDs are in
# $LOCKSMITH_SERVICES_DIR/zookeeper-ensemble-N.pid, so that a test can kill one; `start` again
# (LOCKSMITH_SERVICES=zookeeper-ensemble) starts only the members that are not running.
# As root, PostgreSQL runs as the user postgres and MariaDB as mysql (both refuse root).
# A port held by a process we did not start is reported and left alone.
set -euo pipefail

state_dir=${LOCKSMITH_SERVICES_DIR:-/tmp/locksmith-services}
redis_port=${LOCKSMITH_REDIS_PORT:-16379}
memcached_port=${LOCKSMITH_MEMCACHED_PORT:-21211}
postgres_port=${LOCKSMITH_POSTGRES_PORT:-15432}
mariadb_port=${LOCKSMITH_MARIADB_PORT:-13306}
zookeeper_port=${LOCKSMITH_ZOOKEEPER_PORT:-12181}
etcd_port=${LOCKSMITH_ETCD_PORT:-12379}
quorum_port=${LOCKSMITH_REDIS_QUORUM_PORT:-16380}
ensemble_port=${LOCKSMITH_ZOOKEEPER_ENSEMBLE_PORT:-12281}
services=${LOCKSMITH_SERVICES:-certs redis memcached postgres mariadb zookeeper zookeeper-ensemble etcd redis-quorum}
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

# Right after the fork the PID still runs the exec chain (this script's subshell, setsid,
# setpriv) on its way to the server, so its name is not the server's yet: while starting, any
# live process counts (the probe then tells that the server answers).
starting() {
  local stat
  stat=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$stat" != Z ]
}

pid_of() { cat "$state_dir/$1.pid" 2>/dev/null || true; }

redis_ping() { redis_ping_port "$redis_port"; }
redis_ping_port() {
  redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG
}
quorum_ping() { redis_ping_port "$quorum_member_port"; }

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

# Debian keeps initdb, pg_ctl and postgres out of PATH, in a folder per major version.
postgres_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/postgres" ] || return 1
  echo "$dir"
}

postgres_ping() { pg_isready -q -h 127.0.0.1 -p "$postgres_port" 2>/dev/null; }

# `ping` answers even when the login is refused: it only says the server accepts connections.
mariadb_ping() {
  mariadb-admin --no-defaults --protocol=tcp -h 127.0.0.1 -P "$mariadb_port" -u root \
    --connect-timeout=2 ping >/dev/null 2>&1
}

# run_as_user USER: sets run_as to the prefix that runs a command as USER when we are root (the
# databases refuse to run as root); setpriv execs, so a detached server keeps the PID that
# start_one records.
run_as=()
run_as_user() {
  run_as=()
  [ "$(id -u)" -ne 0 ] || run_as=(setpriv --reuid="$1" --regid="$1" --init-groups --)
}

# service_dir NAME USER: the server's data folder, owned by the user it runs as.
service_dir() {
  mkdir -p "$state_dir/$1"
  [ "$(id -u)" -ne 0 ] || chown "$2:" "$state_dir/$1"
  chmod 700 "$state_dir/$1"
}

# ZooKeeper's four-letter word `srvr` (allowed in zoo.cfg) answers with "Mode: standalone" (or
# leader, follower), and without a Mode while an ensemble member has no quorum.
zookeeper_ping() { zookeeper_ping_port "$zookeeper_port"; }
ensemble_ping() { zookeeper_ping_port "$ensemble_member_port"; }
zookeeper_ping_port() {
  local reply=""
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'srvr' >&3
  reply=$(timeout 2 cat <&3 2>/dev/null || true)
  exec 3<&- 3>&-
  [[ $reply == *Mode:* ]]
}

etcd_ping() {
  etcdctl --endpoints="http://127.0.0.1:$etcd_port" --dial-timeout=2s endpoint health \
    >/dev/null 2>&1
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
  launch_one "$@" || return 1
  [ -n "$launched" ] || return 0
  wait_one "$1" "$3" "$4" 100
}

# launch_one NAME COMM PROBE PORT CMD...: start_one without the wait; sets `launched` to the
# new PID (empty when our instance answered already).
launch_one() {
  local name=$1 comm=$2 probe=$3 port=$4
  shift 4
  local pid
  launched=
  pid=$(pid_of "$name")
  if alive "$pid" "$comm"; then
    if $probe; then
      log "$name already running (pid $pid, port $port)"
      return 0
    fi
    # Ours, not answering yet (an ensemble member during an election): waited for, not
    # started twice.
    launched=$pid
    return 0
  fi
  if port_busy "$port"; then
    log "$name: port $port is in use by a process this script did not start; not touching it"
    return 1
  fi
  mkdir -p "$state_dir/$name"
  touch "$state_dir/$name.log"
  [ -z "${log_owner:-}" ] || chown "$log_owner:" "$state_dir/$name.log"
  setsid "$@" </dev/null >>"$state_dir/$name.log" 2>&1 &
  launched=$!
  echo "$launched" >"$state_dir/$name.pid"
}

# wait_one NAME PROBE PORT TRIES: waits (TRIES × 0.1 s at most) until PROBE answers.
wait_one() {
  local name=$1 probe=$2 port=$3 tries=$4 pid i
  pid=$(pid_of "$name")
  for i in $(seq 1 "$tries"); do
    if ! starting "$pid"; then
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
  log "$name did not answer within $((tries / 10)) s; last log lines:"
  tail -n 20 "$state_dir/$name.log" >&2 || true
  return 1
}

# stop_one NAME COMM [SIGNAL]: PostgreSQL needs SIGINT (fast shutdown); SIGTERM waits for its
# clients to leave.
stop_one() {
  local name=$1 comm=$2 signal=${3:-TERM} pid i
  pid=$(pid_of "$name")
  if alive "$pid" "$comm"; then
    kill "-$signal" "$pid" 2>/dev/null || true
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
      certs) echo "export LOCKSMITH_TEST_TLS_DIR=$state_dir/tls" ;;
      redis) echo "export LOCKSMITH_TEST_REDIS_URL=redis://127.0.0.1:$redis_port/0" ;;
      memcached) echo "export LOCKSMITH_TEST_MEMCACHED=127.0.0.1:$memcached_port" ;;
      postgres) echo "export LOCKSMITH_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:$postgres_port/locktest" ;;
      mariadb) echo "export LOCKSMITH_TEST_MARIADB_DSN=mysql://locktest:locktest-pw@127.0.0.1:$mariadb_port/locktest" ;;
      zookeeper) echo "export LOCKSMITH_TEST_ZOOKEEPER=127.0.0.1:$zookeeper_port" ;;
      zookeeper-ensemble) echo "export LOCKSMITH_TEST_ZOOKEEPER_ENSEMBLE=127.0.0.1:$ensemble_port,127.0.0.1:$((ensemble_port + 1)),127.0.0.1:$((ensemble_port + 2))" ;;
      etcd) echo "export LOCKSMITH_TEST_ETCD=http://127.0.0.1:$etcd_port" ;;
      redis-quorum) echo "export LOCKSMITH_TEST_REDIS_QUORUM=redis://127.0.0.1:$quorum_port/0,redis://127.0.0.1:$((quorum_port + 1))/0,redis://127.0.0.1:$((quorum_port + 2))/0" ;;
    esac
  done
  echo "export LOCKSMITH_SERVICES_DIR=$state_dir"
}

# The test certificates, made once per state folder, in $state_dir/tls:
#   ca.pem                 the test CA, which signed everything below
#   server.pem/.key        for every TLS server of the rig: 127.0.0.1 and localhost; usable as a
#                          client certificate too (etcd's gateway presents it to etcd itself)
#   client.pem/.key        a client certificate without a CommonName (etcd 3.4's JSON gateway
#                          refuses client certificates that have one, the CVE-2018-16886 fix)
#   other-ca.pem           a CA that signed nothing of ours: the "wrong CA" of the tests
# Keys are readable by their owner only; a server running as another user gets its own copy.
make_certs() {
  local dir=$state_dir/tls
  need openssl openssl || return 1
  if [ -s "$dir/client.pem" ]; then
    log "certs already made ($dir)"
    return 0
  fi
  mkdir -p "$dir"
  chmod 755 "$dir"
  (
    cd "$dir"
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=locksmith test CA" -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=locksmith other CA" -keyout other-ca.key -out other-ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
      -keyout server.key -out server.csr 2>/dev/null
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile <(printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' \
        'extendedKeyUsage=serverAuth,clientAuth') -out server.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/" \
      -keyout client.key -out client.csr 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile <(printf '%s\n' 'extendedKeyUsage=clientAuth') -out client.pem 2>/dev/null
    rm -f ./*.csr ./*.srl
    chmod 644 ./*.pem
  ) || { log "certs: openssl failed"; return 1; }
  log "certs made ($dir)"
}

start_postgres() {
  local bin user=postgres
  bin=$(postgres_bin) || { log "postgres not found; install it with scripts/install-deps.sh (package postgresql)"; return 1; }
  need pg_isready postgresql-client || return 1
  [ "$(id -u)" -eq 0 ] || user=$(id -un)
  service_dir postgres "$user"
  run_as_user "$user"
  if [ ! -f "$state_dir/postgres/PG_VERSION" ]; then
    "${run_as[@]}" "$bin/initdb" -D "$state_dir/postgres" -U postgres -A trust --no-sync \
      -E UTF8 --locale=C >>"$state_dir/postgres-initdb.log" 2>&1 ||
      { log "postgres: initdb failed:"; tail -n 20 "$state_dir/postgres-initdb.log" >&2; return 1; }
  fi
  # No UNIX socket: the tests connect over TCP, and a socket folder would need its own owner.
  log_owner=$user start_one postgres postgres postgres_ping "$postgres_port" \
    "${run_as[@]}" "$bin/postgres" -D "$state_dir/postgres" -c listen_addresses=127.0.0.1 \
    -c port="$postgres_port" -c unix_socket_directories= -c fsync=off \
    -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 || return 1
  psql -h 127.0.0.1 -p "$postgres_port" -U postgres -d postgres -Atqc \
    "SELECT 1 FROM pg_database WHERE datname = 'locktest'" | grep -q 1 ||
    psql -h 127.0.0.1 -p "$postgres_port" -U postgres -d postgres -qc "CREATE DATABASE locktest"
}

start_mariadb() {
  local user=mysql
  need mariadbd mariadb-server && need mariadb mariadb-client || return 1
  [ "$(id -u)" -eq 0 ] || user=$(id -un)
  service_dir mariadb "$user"
  run_as_user "$user"
  if [ ! -d "$state_dir/mariadb/mysql" ]; then
    "${run_as[@]}" mariadb-install-db --no-defaults --datadir="$state_dir/mariadb" \
      --auth-root-authentication-method=normal --skip-test-db \
      >>"$state_dir/mariadb-install.log" 2>&1 ||
      { log "mariadb: install-db failed:"; tail -n 20 "$state_dir/mariadb-install.log" >&2; return 1; }
  fi
  log_owner=$user start_one mariadb mariadbd mariadb_ping "$mariadb_port" \
    "${run_as[@]}" mariadbd --no-defaults --datadir="$state_dir/mariadb" \
    --bind-address=127.0.0.1 --port="$mariadb_port" --socket="$state_dir/mariadb/mysqld.sock" \
    --pid-file="$state_dir/mariadb/mariadbd.pid" --innodb-flush-log-at-trx-commit=0 \
    --skip-name-resolve --max-connections=200 || return 1
  # Over the socket: root has no password there, and a TCP login for root is not needed.
  mariadb --no-defaults --socket="$state_dir/mariadb/mysqld.sock" -u root -e "
    CREATE DATABASE IF NOT EXISTS locktest;
    CREATE USER IF NOT EXISTS 'locktest'@'127.0.0.1' IDENTIFIED BY 'locktest-pw';
    GRANT ALL ON locktest.* TO 'locktest'@'127.0.0.1';"
}

# The JVM from Debian's zookeeper package, without its init scripts: a config of our own, a short
# tick so that session-expiry tests take seconds (minimum session timeout 2 ticks = 1 s), no
# fsync, the admin HTTP server off (it would bind *:8080).
start_zookeeper() {
  need java default-jre-headless || return 1
  [ -r /usr/share/java/zookeeper.jar ] ||
    { log "zookeeper.jar not found; install it with scripts/install-deps.sh (package zookeeper)"; return 1; }
  mkdir -p "$state_dir/zookeeper/data"
  cat >"$state_dir/zookeeper/zoo.cfg" <<CFG
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$state_dir/zookeeper/data
clientPort=$zookeeper_port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,wchc,wchs,wchp
forceSync=no
maxClientCnxns=0
CFG
  start_one zookeeper java zookeeper_ping "$zookeeper_port" \
    java -Xms32m -Xmx256m -XX:+UseSerialGC -Dzookeeper.log.dir="$state_dir/zookeeper" \
    -cp "$state_dir/zookeeper:/usr/share/java/zookeeper.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$state_dir/zookeeper/zoo.cfg"
}

# Three ZooKeeper servers in one ensemble (myid 1..3), configured as the standalone one above,
# started together: a member answers only once a quorum (two) has elected a leader.
start_zookeeper_ensemble() {
  need java default-jre-headless || return 1
  [ -r /usr/share/java/zookeeper.jar ] ||
    { log "zookeeper.jar not found; install it with scripts/install-deps.sh (package zookeeper)"; return 1; }
  local i dir members="" rc=0 pids=()
  for i in 1 2 3; do
    members+="server.$i=127.0.0.1:$((ensemble_port + 2 + i)):$((ensemble_port + 5 + i))"$'\n'
  done
  for i in 1 2 3; do
    dir=$state_dir/zookeeper-ensemble-$i
    mkdir -p "$dir/data"
    echo "$i" >"$dir/data/myid"
    cat >"$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=20
syncLimit=4
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$((ensemble_port + i - 1))
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons,wchc,wchs,wchp
forceSync=no
maxClientCnxns=0
$members
CFG
    ensemble_member_port=$((ensemble_port + i - 1))
    launch_one "zookeeper-ensemble-$i" java ensemble_ping "$ensemble_member_port" \
      java -Xms32m -Xmx256m -XX:+UseSerialGC -Dzookeeper.log.dir="$dir" \
      -cp "$dir:/usr/share/java/zookeeper.jar" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" || rc=1
    pids+=("$launched")
  done
  for i in 1 2 3; do
    [ -n "${pids[$((i - 1))]}" ] || continue
    ensemble_member_port=$((ensemble_port + i - 1))
    wait_one "zookeeper-ensemble-$i" ensemble_ping "$ensemble_member_port" 300 || rc=1
  done
  return $rc
}

start_etcd() {
  need etcd etcd-server && need etcdctl etcd-client || return 1
  start_one etcd etcd etcd_ping "$etcd_port" \
    etcd --name locksmith-test --data-dir "$state_dir/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster "locksmith-test=http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster-state new --log-level warn \
    --auto-compaction-mode revision --auto-compaction-retention 10000
  # Compaction: every grant makes a key of its own, and etcd keeps an index entry per deleted key
  # until it compacts, which slows the queue reads of a busy name down over a long run.
}

# Three independent redis-servers: the members of a `combined` quorum.
start_redis_quorum() {
  need redis-server redis-server && need redis-cli redis-tools || return 1
  local i rc=0
  for i in 0 1 2; do
    quorum_member_port=$((quorum_port + i))
    start_one "redis-quorum-$i" redis-server quorum_ping "$quorum_member_port" \
      redis-server --bind 127.0.0.1 --port "$quorum_member_port" --protected-mode yes \
      --daemonize no --dir "$state_dir/redis-quorum-$i" --save '' --appendonly no || rc=1
  done
  return $rc
}

start() {
  mkdir -p "$state_dir"
  # The database servers run as their own users and must reach their folders: others may
  # traverse the state folder, not list it.
  chmod 711 "$state_dir"
  local s rc=0 user_args=()
  # memcached refuses to run as root without -u.
  [ "$(id -u)" -ne 0 ] || user_args=(-u "$(id -un)")
  for s in $services; do
    case $s in
      certs) make_certs || rc=1 ;;
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
      postgres) start_postgres || rc=1 ;;
      mariadb) start_mariadb || rc=1 ;;
      zookeeper) start_zookeeper || rc=1 ;;
      zookeeper-ensemble) start_zookeeper_ensemble || rc=1 ;;
      etcd) start_etcd || rc=1 ;;
      redis-quorum) start_redis_quorum || rc=1 ;;
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
      postgres) stop_one postgres postgres INT ;;
      mariadb) stop_one mariadb mariadbd ;;
      zookeeper) stop_one zookeeper java ;;
      zookeeper-ensemble) for i in 1 2 3; do stop_one "zookeeper-ensemble-$i" java & done; wait ;;
      etcd) stop_one etcd etcd ;;
      redis-quorum) for i in 0 1 2; do stop_one "redis-quorum-$i" redis-server; done ;;
    esac
  done
}

status() {
  local s pid
  for s in $services; do
    case $s in
      certs) [ -s "$state_dir/tls/client.pem" ] && echo "certs: made ($state_dir/tls)" ||
        echo "certs: not made" ;;
      redis) pid=$(pid_of redis); alive "$pid" redis-server && redis_ping &&
        echo "redis: running (pid $pid, port $redis_port)" || echo "redis: not running" ;;
      memcached) pid=$(pid_of memcached); alive "$pid" memcached && memcached_ping &&
        echo "memcached: running (pid $pid, port $memcached_port)" || echo "memcached: not running" ;;
      postgres) pid=$(pid_of postgres); alive "$pid" postgres && postgres_ping &&
        echo "postgres: running (pid $pid, port $postgres_port)" || echo "postgres: not running" ;;
      mariadb) pid=$(pid_of mariadb); alive "$pid" mariadbd && mariadb_ping &&
        echo "mariadb: running (pid $pid, port $mariadb_port)" || echo "mariadb: not running" ;;
      zookeeper) pid=$(pid_of zookeeper); alive "$pid" java && zookeeper_ping &&
        echo "zookeeper: running (pid $pid, port $zookeeper_port)" || echo "zookeeper: not running" ;;
      zookeeper-ensemble) for i in 1 2 3; do
          ensemble_member_port=$((ensemble_port + i - 1)); pid=$(pid_of "zookeeper-ensemble-$i")
          alive "$pid" java && ensemble_ping &&
            echo "zookeeper-ensemble-$i: running (pid $pid, port $ensemble_member_port)" ||
            echo "zookeeper-ensemble-$i: not running"
        done ;;
      etcd) pid=$(pid_of etcd); alive "$pid" etcd && etcd_ping &&
        echo "etcd: running (pid $pid, port $etcd_port)" || echo "etcd: not running" ;;
      redis-quorum) for i in 0 1 2; do
          quorum_member_port=$((quorum_port + i)); pid=$(pid_of "redis-quorum-$i")
          alive "$pid" redis-server && quorum_ping &&
            echo "redis-quorum-$i: running (pid $pid, port $quorum_member_port)" ||
            echo "redis-quorum-$i: not running"
        done ;;
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
