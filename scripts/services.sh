#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Starts and stops the servers the integration tests talk to: redis-server, a redis-server that
# speaks only TLS and requires client certificates and a password (`redis-tls`;
# LOCKSMITH_TEST_REDIS_TLS_URL), memcached, PostgreSQL, MariaDB, ZooKeeper (one standalone server,
# and an ensemble of three), etcd, a 3-member etcd cluster with TLS and client certificates, three
# more redis-servers (members of the `combined` strategy's quorum), Redis behind Sentinel and a
# Redis Cluster, on 127.0.0.1 only, on non-default ports, with their data, logs and PID
# files in one state directory. Test settings only: PostgreSQL trusts every local connection and
# runs with fsync off; MariaDB has a `locktest` user whose password is in the env lines. With the
# certificates (`certs`), PostgreSQL and MariaDB also serve TLS and each has a user that may only
# connect over TLS (locktest_tls; LOCKSMITH_TEST_POSTGRES_TLS_DSN, LOCKSMITH_TEST_MARIADB_TLS_DSN).
# Installs nothing (scripts/install-deps.sh does, from scripts/packages-servers.txt); it only
# checks that the binaries exist.
#
#   scripts/services.sh start   start what is not running yet, wait until each answers, write
#                               $LOCKSMITH_SERVICES_DIR/env (export lines for the tests)
#   scripts/services.sh stop    stop what `start` started, by PID; safe when nothing runs
#   scripts/services.sh env     print the export lines (source them: eval "$(... env)")
#   scripts/services.sh status  one line per service
#
# Environment: LOCKSMITH_SERVICES_DIR (default /tmp/locksmith-services), LOCKSMITH_REDIS_PORT
# (16379), LOCKSMITH_REDIS_TLS_PORT (16396), LOCKSMITH_MEMCACHED_PORT (21211), LOCKSMITH_POSTGRES_PORT (15432),
# LOCKSMITH_MARIADB_PORT (13306), LOCKSMITH_ZOOKEEPER_PORT (12181), LOCKSMITH_ETCD_PORT (12379;
# its peer port is the next one), LOCKSMITH_ETCD_CLUSTER_PORT (12479; the members' client ports
# are it and the next two, their peer ports the three after), LOCKSMITH_ZOOKEEPER_ENSEMBLE_PORT
# (12281: the client ports of the three members are it and the next two, their quorum ports the
# next three, their election ports the three after), LOCKSMITH_REDIS_QUORUM_PORT (16380; the
# three members use it and the next two), LOCKSMITH_REDIS_SENTINEL_PORT (16390: a master, its
# replica, then three Sentinels on the next four; LOCKSMITH_REDIS_SENTINEL_TLS=1: TLS only),
# LOCKSMITH_REDIS_CLUSTER_PORT (16400: six nodes
# of a Redis Cluster, three masters and a replica of each, on it and the next five; bus ports 1000
# above; LOCKSMITH_REDIS_CLUSTER_TLS=1: TLS only), LOCKSMITH_SERVICES (default: all, "certs redis redis-tls memcached postgres mariadb
# zookeeper zookeeper-ensemble etcd etcd-cluster redis-quorum redis-sentinel redis-cluster";
# `certs` makes the test certificates the TLS servers use and goes before them).
#
# Members that a test may kill, and restart with `scripts/services.sh start` (only what is not
# running is started; LOCKSMITH_SERVICES narrows it) or with the command line they ran:
# etcd-cluster-0..2 (PID files etcd-cluster-N.pid, data in etcd-cluster-N/) and
# zookeeper-ensemble-1..3 (myid 1..3, PID files zookeeper-ensemble-N.pid).
# As root, PostgreSQL runs as the user postgres and MariaDB as mysql (both refuse root).
# A port held by a process we did not start is reported and left alone.
set -euo pipefail

state_dir=${LOCKSMITH_SERVICES_DIR:-/tmp/locksmith-services}
redis_port=${LOCKSMITH_REDIS_PORT:-16379}
redis_tls_port=${LOCKSMITH_REDIS_TLS_PORT:-16396}
memcached_port=${LOCKSMITH_MEMCACHED_PORT:-21211}
postgres_port=${LOCKSMITH_POSTGRES_PORT:-15432}
mariadb_port=${LOCKSMITH_MARIADB_PORT:-13306}
zookeeper_port=${LOCKSMITH_ZOOKEEPER_PORT:-12181}
etcd_port=${LOCKSMITH_ETCD_PORT:-12379}
etcd_cluster_port=${LOCKSMITH_ETCD_CLUSTER_PORT:-12479}
quorum_port=${LOCKSMITH_REDIS_QUORUM_PORT:-16380}
sentinel_port=${LOCKSMITH_REDIS_SENTINEL_PORT:-16390}
cluster_port=${LOCKSMITH_REDIS_CLUSTER_PORT:-16400}
ensemble_port=${LOCKSMITH_ZOOKEEPER_ENSEMBLE_PORT:-12281}
services=${LOCKSMITH_SERVICES:-certs redis redis-tls memcached postgres mariadb zookeeper zookeeper-ensemble etcd etcd-cluster redis-quorum redis-sentinel redis-cluster}
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

# redis-tls: TLS only (--port 0), a client certificate and the password required.
redis_tls_password=locktest-redis-tls-pw
redis_tls_ping() {
  local tls=$state_dir/tls
  redis-cli -h 127.0.0.1 -p "$redis_tls_port" --tls --cacert "$tls/ca.pem" --cert "$tls/client.pem" \
    --key "$tls/client.key" --no-auth-warning -a "$redis_tls_password" ping 2>/dev/null | grep -q PONG
}
start_redis_tls() {
  local tls=$state_dir/tls
  need redis-server redis-server && need redis-cli redis-tools || return 1
  [ -s "$tls/client.pem" ] || make_certs || return 1
  start_one redis-tls redis-server redis_tls_ping "$redis_tls_port" \
    redis-server --bind 127.0.0.1 --port 0 --tls-port "$redis_tls_port" --protected-mode yes \
    --tls-cert-file "$tls/server.pem" --tls-key-file "$tls/server.key" \
    --tls-ca-cert-file "$tls/ca.pem" --tls-auth-clients yes --requirepass "$redis_tls_password" \
    --daemonize no --dir "$state_dir/redis-tls" --save '' --appendonly no
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

# The TLS cluster: client URLs https://127.0.0.1:(port + i), peer URLs (port + 3 + i).
etcd_cluster_endpoints() {
  echo "https://127.0.0.1:$etcd_cluster_port,https://127.0.0.1:$((etcd_cluster_port + 1)),https://127.0.0.1:$((etcd_cluster_port + 2))"
}

etcd_cluster_ping() {
  local tls=$state_dir/tls
  etcdctl --endpoints="$(etcd_cluster_endpoints)" --cacert "$tls/ca.pem" --cert "$tls/client.pem"     --key "$tls/client.key" --dial-timeout=2s endpoint health >/dev/null 2>&1
}

# A member answers only once the cluster has a quorum: while starting, its peer port listening
# is enough (start_etcd_cluster then waits for the whole cluster).
etcd_member_listening() { port_busy "$etcd_member_peer_port"; }

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
      # The certificates are those of `certs` (LOCKSMITH_TEST_TLS_DIR): ca.pem, client.pem/.key.
      redis-tls) echo "export LOCKSMITH_TEST_REDIS_TLS_URL=rediss://:$redis_tls_password@127.0.0.1:$redis_tls_port/0"
        case " $services " in *" certs "*) ;; *) echo "export LOCKSMITH_TEST_TLS_DIR=$state_dir/tls" ;; esac ;;
      memcached) echo "export LOCKSMITH_TEST_MEMCACHED=127.0.0.1:$memcached_port" ;;
      postgres) echo "export LOCKSMITH_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:$postgres_port/locktest"
        # The role that may only connect over TLS (hostssl), to its own database.
        [ ! -s "$state_dir/tls/ca.pem" ] ||
          echo "export LOCKSMITH_TEST_POSTGRES_TLS_DSN='postgresql://locktest_tls:locktest-tls-pw@127.0.0.1:$postgres_port/locktest_tls?sslmode=verify-full&sslrootcert=$state_dir/tls/ca.pem'" ;;
      mariadb) echo "export LOCKSMITH_TEST_MARIADB_DSN=mysql://locktest:locktest-pw@127.0.0.1:$mariadb_port/locktest"
        # The TLS-only user; verify-full is also what the CA alone implies.
        [ ! -s "$state_dir/tls/ca.pem" ] ||
          echo "export LOCKSMITH_TEST_MARIADB_TLS_DSN='mysql://locktest_tls:locktest-tls-pw@127.0.0.1:$mariadb_port/locktest?sslmode=verify-full&sslrootcert=$state_dir/tls/ca.pem'" ;;
      zookeeper) echo "export LOCKSMITH_TEST_ZOOKEEPER=127.0.0.1:$zookeeper_port" ;;
      zookeeper-ensemble) echo "export LOCKSMITH_TEST_ZOOKEEPER_ENSEMBLE=127.0.0.1:$ensemble_port,127.0.0.1:$((ensemble_port + 1)),127.0.0.1:$((ensemble_port + 2))" ;;
      etcd) echo "export LOCKSMITH_TEST_ETCD=http://127.0.0.1:$etcd_port" ;;
      etcd-cluster) echo "export LOCKSMITH_TEST_ETCD_CLUSTER=$(etcd_cluster_endpoints)" ;;
      redis-sentinel)
        echo "export LOCKSMITH_TEST_REDIS_SENTINELS=127.0.0.1:$((sentinel_port + 2)),127.0.0.1:$((sentinel_port + 3)),127.0.0.1:$((sentinel_port + 4))"
        echo "export LOCKSMITH_TEST_REDIS_SENTINEL_MASTER=$sentinel_master"
        echo "export LOCKSMITH_TEST_REDIS_SENTINEL_PASSWORD=$sentinel_password" ;;
      redis-cluster)
        echo "export LOCKSMITH_TEST_REDIS_CLUSTER=$(cluster_nodes | xargs | tr ' ' ',')"
        echo "export LOCKSMITH_TEST_REDIS_CLUSTER_PASSWORD=$sentinel_password" ;;
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
  # TLS with the rig's server certificate (make_certs; the key must belong to the server's user
  # with mode 0600: it gets its own copy). The role locktest_tls may only connect over TLS, with
  # its password: hostssl for it, then a reject over plain host, before the trust line of the
  # others (pg_hba.conf is read top down, first match wins).
  local ssl_args=()
  if [ -s "$state_dir/tls/server.pem" ]; then
    install -m 600 "$state_dir/tls/server.key" "$state_dir/postgres/tls-server.key"
    [ "$(id -u)" -ne 0 ] || chown "$user:" "$state_dir/postgres/tls-server.key"
    ssl_args=(-c ssl=on -c ssl_cert_file="$state_dir/tls/server.pem"
      -c ssl_key_file="$state_dir/postgres/tls-server.key" -c ssl_ca_file="$state_dir/tls/ca.pem")
    "${run_as[@]}" tee "$state_dir/postgres/pg_hba.conf" >/dev/null <<HBA
hostssl all locktest_tls 127.0.0.1/32 scram-sha-256
host    all locktest_tls 127.0.0.1/32 reject
host    all all          127.0.0.1/32 trust
HBA
  fi
  # No UNIX socket: the tests connect over TCP, and a socket folder would need its own owner.
  log_owner=$user start_one postgres postgres postgres_ping "$postgres_port" \
    "${run_as[@]}" "$bin/postgres" -D "$state_dir/postgres" -c listen_addresses=127.0.0.1 \
    -c port="$postgres_port" -c unix_socket_directories= -c fsync=off \
    -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 \
    "${ssl_args[@]}" || return 1
  local pg=(psql -h 127.0.0.1 -p "$postgres_port" -U postgres -d postgres -Atq)
  "${pg[@]}" -c "SELECT 1 FROM pg_database WHERE datname = 'locktest'" | grep -q 1 ||
    "${pg[@]}" -c "CREATE DATABASE locktest"
  [ ${#ssl_args[@]} -gt 0 ] || return 0
  # Its own database, which it owns: since PostgreSQL 15 only the owner may create in public.
  "${pg[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = 'locktest_tls'" | grep -q 1 ||
    "${pg[@]}" -c "CREATE ROLE locktest_tls LOGIN PASSWORD 'locktest-tls-pw'"
  "${pg[@]}" -c "SELECT 1 FROM pg_database WHERE datname = 'locktest_tls'" | grep -q 1 ||
    "${pg[@]}" -c "CREATE DATABASE locktest_tls OWNER locktest_tls"
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
  # TLS with the rig's server certificate (make_certs), its key copied for the server's user.
  # The user locktest_tls may only connect over TLS (REQUIRE SSL); the plain tests keep their
  # user, so require_secure_transport stays off.
  local ssl_args=() tls_user=""
  if [ -s "$state_dir/tls/server.pem" ]; then
    install -m 600 "$state_dir/tls/server.key" "$state_dir/mariadb/tls-server.key"
    [ "$(id -u)" -ne 0 ] || chown "$user:" "$state_dir/mariadb/tls-server.key"
    ssl_args=(--ssl-ca="$state_dir/tls/ca.pem" --ssl-cert="$state_dir/tls/server.pem"
      --ssl-key="$state_dir/mariadb/tls-server.key")
    tls_user="
    CREATE USER IF NOT EXISTS 'locktest_tls'@'127.0.0.1' IDENTIFIED BY 'locktest-tls-pw'
      REQUIRE SSL;
    GRANT ALL ON locktest.* TO 'locktest_tls'@'127.0.0.1';"
  fi
  log_owner=$user start_one mariadb mariadbd mariadb_ping "$mariadb_port" \
    "${run_as[@]}" mariadbd --no-defaults --datadir="$state_dir/mariadb" \
    --bind-address=127.0.0.1 --port="$mariadb_port" --socket="$state_dir/mariadb/mysqld.sock" \
    --pid-file="$state_dir/mariadb/mariadbd.pid" --innodb-flush-log-at-trx-commit=0 \
    --skip-name-resolve --max-connections=200 "${ssl_args[@]}" || return 1
  # Over the socket: root has no password there, and a TCP login for root is not needed.
  mariadb --no-defaults --socket="$state_dir/mariadb/mysqld.sock" -u root -e "
    CREATE DATABASE IF NOT EXISTS locktest;
    CREATE USER IF NOT EXISTS 'locktest'@'127.0.0.1' IDENTIFIED BY 'locktest-pw';
    GRANT ALL ON locktest.* TO 'locktest'@'127.0.0.1';$tls_user"
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

# Raft timing of the test servers: a 50 ms heartbeat and a 500 ms election timeout (etcd's
# defaults: 100 ms, 1 s). etcd's shortest lease is 1.5 election timeouts, rounded up to whole
# seconds: 1 s here instead of 2 s, so that the tests that wait for a lease to expire wait half
# as long (tests/support/entries/etcd.cpp). Under two CPU burners the cluster elected about as
# often as with the defaults: 3 leader changes in 17 minutes of its tests and loops, against 3
# in 16 minutes (issue 28). A new leader renews every lease to its TTL plus the election
# timeout: an expiry case that meets one sees its lease outlive the TTL, with either timing.
etcd_timing=(--heartbeat-interval 50 --election-timeout 500)

# An etcd of ours left running by an older version of this script keeps etcd's default timing,
# and with it 2 s leases: the tests' 1 s ones would outlive what they expect. Said, not restarted.
etcd_timing_check() {
  local pid
  pid=$(pid_of "$1")
  alive "$pid" etcd || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--election-timeout ${etcd_timing[3]} " ||
    log "$1 (pid $pid) runs without ${etcd_timing[*]}: the etcd tests expect it (stop and start it)"
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
    --initial-cluster-state new --log-level warn "${etcd_timing[@]}" \
    --auto-compaction-mode revision --auto-compaction-retention 10000
  etcd_timing_check etcd
  # Compaction: every grant makes a key of its own, and etcd keeps an index entry per deleted key
  # until it compacts, which slows the queue reads of a busy name down over a long run.
}

# Three etcd members on 127.0.0.1 that form one cluster, with TLS on client and peer URLs and
# client certificates required on both (as Kubernetes runs its etcd). Every member presents
# server.pem, which has clientAuth too: a member's gRPC gateway connects to the member itself
# with it. Clients use client.pem, which has no CommonName: etcd 3.4's JSON gateway answers
# HTTP 400 to one that has (its CN-as-user rule, CVE-2018-16886; checked by hand on 3.4.23).
start_etcd_cluster() {
  need etcd etcd-server && need etcdctl etcd-client || return 1
  local tls=$state_dir/tls i rc=0 initial=""
  [ -s "$tls/client.pem" ] || make_certs || return 1
  for i in 0 1 2; do
    initial+="${initial:+,}etcd-cluster-$i=https://127.0.0.1:$((etcd_cluster_port + 3 + i))"
  done
  for i in 0 1 2; do
    etcd_member_peer_port=$((etcd_cluster_port + 3 + i))
    start_one "etcd-cluster-$i" etcd etcd_member_listening "$((etcd_cluster_port + i))"       etcd --name "etcd-cluster-$i" --data-dir "$state_dir/etcd-cluster-$i/data"       --listen-client-urls "https://127.0.0.1:$((etcd_cluster_port + i))"       --advertise-client-urls "https://127.0.0.1:$((etcd_cluster_port + i))"       --listen-peer-urls "https://127.0.0.1:$etcd_member_peer_port"       --initial-advertise-peer-urls "https://127.0.0.1:$etcd_member_peer_port"       --initial-cluster "$initial" --initial-cluster-state new       --initial-cluster-token locksmith-test-cluster       --cert-file "$tls/server.pem" --key-file "$tls/server.key"       --client-cert-auth --trusted-ca-file "$tls/ca.pem"       --peer-cert-file "$tls/server.pem" --peer-key-file "$tls/server.key"       --peer-client-cert-auth --peer-trusted-ca-file "$tls/ca.pem"       --log-level warn "${etcd_timing[@]}" --auto-compaction-mode revision --auto-compaction-retention 10000 || rc=1
    etcd_timing_check "etcd-cluster-$i"
  done
  [ $rc -eq 0 ] || return 1
  for i in $(seq 1 150); do
    if etcd_cluster_ping; then
      log "etcd-cluster ready ($(etcd_cluster_endpoints))"
      return 0
    fi
    sleep 0.1
  done
  log "etcd-cluster did not become healthy within 15 s; last log lines:"
  tail -n 10 "$state_dir"/etcd-cluster-*.log >&2 || true
  return 1
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

# Redis behind Sentinel: a master, its replica and three Sentinels (Debian ships no
# redis-sentinel binary: `redis-server FILE --sentinel`). Every one of them requires the test
# password, as production ones do: the replica and a demoted master authenticate to the master
# (masterauth), the Sentinels to the servers (auth-pass) and to each other (sentinel-pass). Short
# timeouts, so that a failover in the tests takes seconds. A Sentinel rewrites its file, so it
# is written only at the first start; later starts find the roles as the last failover left them.
# With LOCKSMITH_REDIS_SENTINEL_TLS=1 (a test's rig of its own) every one of them speaks only
# TLS, to clients, to each other and for replication, and requires a client certificate (the
# certificates of `certs`; the server certificate is the client one between them).
sentinel_master=locksmith-test
sentinel_password=locktest-sentinel-pw
sentinel_tls=${LOCKSMITH_REDIS_SENTINEL_TLS:-}
redis_auth_ping_port() {
  local tls=$state_dir/tls how=()
  [ -z "$sentinel_tls" ] || how=(--tls --cacert "$tls/ca.pem" --cert "$tls/client.pem" --key "$tls/client.key")
  redis-cli "${how[@]}" -h 127.0.0.1 -p "$1" --no-auth-warning -a "$sentinel_password" ping 2>/dev/null | grep -q PONG
}
sentinel_member_ping() { redis_auth_ping_port "$sentinel_member_port"; }
start_redis_sentinel() {
  need redis-server redis-server && need redis-cli redis-tools || return 1
  local i rc=0 dir conf tls=$state_dir/tls listen=()
  [ -z "$sentinel_tls" ] || [ -s "$tls/client.pem" ] || make_certs || return 1
  for i in 0 1; do
    sentinel_member_port=$((sentinel_port + i))
    local role=()
    [ "$i" = 0 ] || role=(--replicaof 127.0.0.1 "$sentinel_port")
    listen=(--port "$sentinel_member_port")
    [ -z "$sentinel_tls" ] || listen=(--port 0 --tls-port "$sentinel_member_port"
      --tls-replication yes --tls-cert-file "$tls/server.pem" --tls-key-file "$tls/server.key"
      --tls-ca-cert-file "$tls/ca.pem" --tls-auth-clients yes)
    # A server that a failover demoted was rewritten by nobody (no config file): its role comes
    # from the command line, and Sentinel corrects it within a second.
    start_one "redis-sentinel-server-$i" redis-server sentinel_member_ping "$sentinel_member_port" \
      redis-server --bind 127.0.0.1 "${listen[@]}" --protected-mode yes \
      --daemonize no --dir "$state_dir/redis-sentinel-server-$i" --save '' --appendonly no \
      --requirepass "$sentinel_password" --masterauth "$sentinel_password" "${role[@]}" || rc=1
  done
  for i in 0 1 2; do
    sentinel_member_port=$((sentinel_port + 2 + i))
    dir=$state_dir/redis-sentinel-$i
    conf=$dir/sentinel.conf
    mkdir -p "$dir"
    if [ ! -s "$conf" ]; then
      if [ -n "$sentinel_tls" ]; then
        printf '%s\n' "port 0" "tls-port $sentinel_member_port" "tls-replication yes" \
          "tls-cert-file $tls/server.pem" "tls-key-file $tls/server.key" \
          "tls-ca-cert-file $tls/ca.pem" "tls-auth-clients yes"
      else
        echo "port $sentinel_member_port"
      fi >"$conf"
      cat >>"$conf" <<CONF
bind 127.0.0.1
dir $dir
requirepass $sentinel_password
sentinel sentinel-pass $sentinel_password
sentinel monitor $sentinel_master 127.0.0.1 $sentinel_port 2
sentinel auth-pass $sentinel_master $sentinel_password
sentinel down-after-milliseconds $sentinel_master 1000
sentinel failover-timeout $sentinel_master 5000
sentinel parallel-syncs $sentinel_master 1
CONF
    fi
    chmod 600 "$conf"
    start_one "redis-sentinel-$i" redis-server sentinel_member_ping "$sentinel_member_port" \
      redis-server "$conf" --sentinel || rc=1
  done
  return $rc
}

# A Redis Cluster of six nodes: three masters and a replica of each (`redis-cli --cluster
# create`, once: the nodes keep the cluster in their nodes.conf), with the Sentinel rig's
# password. The bus ports are set (1000 above each node) because the default, port + 10000,
# overflows above 55535. With LOCKSMITH_REDIS_CLUSTER_TLS=1 (a test's cluster of its own) every
# node speaks only TLS, to clients, on the bus and to its replica, and requires a client
# certificate (the certificates of `certs`).
cluster_tls=${LOCKSMITH_REDIS_CLUSTER_TLS:-}
cluster_nodes() { local i; for i in 0 1 2 3 4 5; do printf '127.0.0.1:%s ' $((cluster_port + i)); done; }
cluster_cli() {
  local tls=$state_dir/tls
  if [ -n "$cluster_tls" ]; then
    redis-cli --tls --cacert "$tls/ca.pem" --cert "$tls/client.pem" --key "$tls/client.key" \
      --no-auth-warning -a "$sentinel_password" "$@"
  else
    redis-cli --no-auth-warning -a "$sentinel_password" "$@"
  fi
}
cluster_member_ping() { cluster_cli -h 127.0.0.1 -p "$sentinel_member_port" ping 2>/dev/null | grep -q PONG; }
cluster_ok() {
  cluster_cli -h 127.0.0.1 -p "$cluster_port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'
}
start_redis_cluster() {
  need redis-server redis-server && need redis-cli redis-tools || return 1
  local i rc=0 port tls=$state_dir/tls listen
  [ -z "$cluster_tls" ] || [ -s "$tls/client.pem" ] || make_certs || return 1
  for i in 0 1 2 3 4 5; do
    sentinel_member_port=$((cluster_port + i))
    listen=(--port "$sentinel_member_port")
    [ -z "$cluster_tls" ] || listen=(--port 0 --tls-port "$sentinel_member_port" --tls-cluster yes
      --tls-replication yes --tls-cert-file "$tls/server.pem" --tls-key-file "$tls/server.key"
      --tls-ca-cert-file "$tls/ca.pem" --tls-auth-clients yes)
    start_one "redis-cluster-$i" redis-server cluster_member_ping "$sentinel_member_port" \
      redis-server --bind 127.0.0.1 "${listen[@]}" --protected-mode yes \
      --daemonize no --dir "$state_dir/redis-cluster-$i" --save '' --appendonly no \
      --cluster-enabled yes --cluster-port $((sentinel_member_port + 1000)) \
      --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --requirepass "$sentinel_password" --masterauth "$sentinel_password" || rc=1
  done
  [ $rc = 0 ] || return $rc
  # Nodes that were a cluster before keep it (nodes.conf) and need a moment to agree again.
  if cluster_cli -h 127.0.0.1 -p "$cluster_port" \
    cluster info 2>/dev/null | grep -q '^cluster_slots_assigned:0'; then
    # shellcheck disable=SC2046
    cluster_cli --cluster create $(cluster_nodes) \
      --cluster-replicas 1 --cluster-yes >>"$state_dir/redis-cluster-create.log" 2>&1 ||
      { log "redis-cluster: create failed:"; tail -n 20 "$state_dir/redis-cluster-create.log" >&2; return 1; }
  fi
  for i in $(seq 1 100); do cluster_ok && break; sleep 0.1; done
  cluster_ok || { log "redis-cluster: its state is not ok after 10 s"; return 1; }
  log "redis-cluster ready (127.0.0.1:$cluster_port-$((cluster_port + 5)))"
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
      redis-tls) start_redis_tls || rc=1 ;;
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
      etcd-cluster) start_etcd_cluster || rc=1 ;;
      redis-quorum) start_redis_quorum || rc=1 ;;
      redis-sentinel) start_redis_sentinel || rc=1 ;;
      redis-cluster) start_redis_cluster || rc=1 ;;
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
      redis-tls) stop_one redis-tls redis-server ;;
      memcached) stop_one memcached memcached ;;
      postgres) stop_one postgres postgres INT ;;
      mariadb) stop_one mariadb mariadbd ;;
      zookeeper) stop_one zookeeper java ;;
      zookeeper-ensemble) for i in 1 2 3; do stop_one "zookeeper-ensemble-$i" java & done; wait ;;
      etcd) stop_one etcd etcd ;;
      etcd-cluster) for i in 0 1 2; do stop_one "etcd-cluster-$i" etcd; done ;;
      redis-quorum) for i in 0 1 2; do stop_one "redis-quorum-$i" redis-server; done ;;
      redis-sentinel)
        for i in 0 1 2; do stop_one "redis-sentinel-$i" redis-server; done
        for i in 0 1; do stop_one "redis-sentinel-server-$i" redis-server; done ;;
      redis-cluster) for i in 0 1 2 3 4 5; do stop_one "redis-cluster-$i" redis-server; done ;;
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
      redis-tls) pid=$(pid_of redis-tls); alive "$pid" redis-server && redis_tls_ping &&
        echo "redis-tls: running (pid $pid, port $redis_tls_port)" || echo "redis-tls: not running" ;;
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
      etcd-cluster) for i in 0 1 2; do
          pid=$(pid_of "etcd-cluster-$i")
          alive "$pid" etcd && echo "etcd-cluster-$i: running (pid $pid, port $((etcd_cluster_port + i)))" ||
            echo "etcd-cluster-$i: not running"
        done ;;
      redis-quorum) for i in 0 1 2; do
          quorum_member_port=$((quorum_port + i)); pid=$(pid_of "redis-quorum-$i")
          alive "$pid" redis-server && quorum_ping &&
            echo "redis-quorum-$i: running (pid $pid, port $quorum_member_port)" ||
            echo "redis-quorum-$i: not running"
        done ;;
      redis-sentinel) for i in 0 1 2 3 4; do
          local name=redis-sentinel-server-$i
          [ "$i" -lt 2 ] || name=redis-sentinel-$((i - 2))
          sentinel_member_port=$((sentinel_port + i)); pid=$(pid_of "$name")
          alive "$pid" redis-server && sentinel_member_ping &&
            echo "$name: running (pid $pid, port $sentinel_member_port)" || echo "$name: not running"
        done ;;
      redis-cluster) for i in 0 1 2 3 4 5; do
          sentinel_member_port=$((cluster_port + i)); pid=$(pid_of "redis-cluster-$i")
          alive "$pid" redis-server && cluster_member_ping &&
            echo "redis-cluster-$i: running (pid $pid, port $sentinel_member_port)" ||
            echo "redis-cluster-$i: not running"
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
