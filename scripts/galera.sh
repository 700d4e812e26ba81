#!/usr/bin/env bash
# A three-node MariaDB Galera cluster on loopback, for tests and for people
# who want to see paysvc on a multi-primary cluster (docs/DEPLOYING.md).
#
#   scripts/galera.sh up     [BASEDIR]   create (first time) and start all three nodes, wait until Synced
#   scripts/galera.sh down   [BASEDIR]   stop all three nodes (SIGTERM, then SIGKILL), keep the data
#   scripts/galera.sh destroy [BASEDIR]  down, then remove BASEDIR
#   scripts/galera.sh status [BASEDIR]   one line per node: port, pid, wsrep state, cluster size
#   scripts/galera.sh kill N [BASEDIR]   SIGKILL node N (1-3): a machine lost, nothing flushed
#   scripts/galera.sh start N [BASEDIR]  start node N again (it rejoins by IST, or SST if it must)
#                                        and wait until it is Synced
#   scripts/galera.sh dsn N [BASEDIR]    print a PAYSVC_DSN for node N (database paysvc, causal reads)
#   scripts/galera.sh deps               only install what the cluster needs (CI)
#
# BASEDIR defaults to $GALERA_BASEDIR, else /tmp/paysvc-galera. Each node has
# BASEDIR/nodeN/{my.cnf,data,error.log,mysqld.pid}. Ports (never the main
# server's 3306): node N listens for SQL on GALERA_PORT (default 23306)
# + 10*(N-1), for group communication on GALERA_GCOMM_PORT (default 24567)
# + 10*(N-1), for IST on that +1 and for rsync SST on that +2: all below
# Linux's ephemeral range (32768-60999), where a busy machine's outgoing
# connections would sooner or later hold a port a node needs (mariadbd
# then aborts: "Bind on TCP/IP port ... Address already in use"). The root
# account has no password and is reachable over TCP from 127.0.0.1 only.
#
# galera-4 and rsync are installed with apt-get when missing (CI machines).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
node=""
case "$cmd" in
  kill|start|dsn) node=${1:-}; [[ "$node" =~ ^[123]$ ]] || usage; shift ;;
esac
base=${1:-${GALERA_BASEDIR:-/tmp/paysvc-galera}}
mysql_port=${GALERA_PORT:-23306}
gcomm_port=${GALERA_GCOMM_PORT:-24567}
provider=/usr/lib/galera/libgalera_smm.so
# How long one node may take to reach Synced (a full SST on a loaded 2-core
# machine included).
sync_timeout=${GALERA_SYNC_TIMEOUT:-180}
# The writeset cache a returning node catches up from (IST). A production
# node keeps hours of writes; tests need little (GALERA_GCACHE=32M).
gcache=${GALERA_GCACHE:-128M}

port_of()  { echo $((mysql_port + 10 * ($1 - 1))); }
gcomm_of() { echo $((gcomm_port + 10 * ($1 - 1))); }
dir_of()   { echo "$base/node$1"; }
log()      { echo "galera: $*" >&2; }
# The user the nodes run as. Not root: the joiner's rsync daemon, started by
# wsrep_sst_rsync, drops root to "nobody" and then cannot write the data
# directory, so an SST run as root fails (rsync code 23).
run_as=$(id -un)
[ "$run_as" != root ] || run_as=mysql

ensure_packages() {
  local missing=()
  [ -f "$provider" ] || missing+=(galera-4)
  command -v rsync >/dev/null || missing+=(rsync)
  command -v mariadb-install-db >/dev/null || missing+=(mariadb-server)
  command -v mariadb >/dev/null || missing+=(mariadb-client)
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
}

sql() { # sql N STATEMENT: one value, no headers; fails if the node does not answer
  mariadb --protocol=tcp -h127.0.0.1 -P"$(port_of "$1")" -uroot --connect-timeout=2 -N -B -e "$2" 2>/dev/null
}

wsrep_var() { sql "$1" "SHOW GLOBAL STATUS LIKE '$2'" | cut -f2; }

pid_of() { # the running mariadbd of node N, if any
  local f; f="$(dir_of "$1")/mysqld.pid"
  [ -s "$f" ] || return 1
  local pid; pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

write_config() {
  local n=$1 d; d=$(dir_of "$n")
  local g1 g2 g3 gn; g1=$(gcomm_of 1); g2=$(gcomm_of 2); g3=$(gcomm_of 3); gn=$(gcomm_of "$n")
  mkdir -p "$d"
  # evs.*: a SIGKILLed node's peers notice the lost TCP connection at once,
  # but only declare the node gone after evs.suspect_timeout; until then
  # the survivors' commits wait. The defaults (5 s suspect, 15 s inactive)
  # are for WANs; on loopback two and four seconds are plenty.
  cat >"$d/my.cnf" <<EOF
[mysqld]
user=$run_as
datadir=$d/data
socket=$d/mysqld.sock
pid-file=$d/mysqld.pid
log-error=$d/error.log
port=$(port_of "$n")
bind-address=127.0.0.1
skip-name-resolve
max_connections=600
innodb_buffer_pool_size=64M
innodb_log_file_size=48M
# Durability is the cluster's job here: a transaction is on all three
# nodes when COMMIT returns. A production node keeps the default (1).
innodb_flush_log_at_trx_commit=2
# Galera needs row-based replication and interleaved AUTO_INCREMENT locks.
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=$provider
wsrep_cluster_name=paysvc_galera
wsrep_cluster_address=gcomm://127.0.0.1:$g1,127.0.0.1:$g2,127.0.0.1:$g3
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$gn
wsrep_node_incoming_address=127.0.0.1:$(port_of "$n")
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$gn;ist.recv_addr=127.0.0.1:$((gn + 1));gcache.size=$gcache;evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S;evs.install_timeout=PT4S"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((gn + 2))
wsrep_slave_threads=2
# An autocommit statement that loses certification is run again by the
# server this many times before the client sees 1213 (the default, 1).
wsrep_retry_autocommit=1
EOF
}

# start_node N [extra mariadbd args]: start node N in the background.
start_node() {
  local n=$1; shift
  local d; d=$(dir_of "$n")
  if pid_of "$n" >/dev/null; then log "node $n already running"; return; fi
  # After a crash grastate.dat says seqno -1; recover the position from
  # InnoDB so that the node asks its peers for the missing writesets (IST)
  # instead of a whole copy of the data (SST). mysqld_safe and systemd's
  # galera_recovery do the same.
  local pos=()
  if [ -f "$d/data/grastate.dat" ] && grep -q '^seqno: *-1' "$d/data/grastate.dat"; then
    local rec
    rec=$(/usr/sbin/mariadbd --defaults-file="$d/my.cnf" --wsrep-recover --log-error="$d/recover.log" >/dev/null 2>&1;
          sed -n 's/.*WSREP: Recovered position: *\([^ ]*\).*/\1/p' "$d/recover.log" | tail -n1) || true
    rm -f "$d/recover.log"
    if [ -n "$rec" ]; then pos=(--wsrep_start_position="$rec"); log "node $n: recovered position $rec"; fi
  fi
  setsid /usr/sbin/mariadbd --defaults-file="$d/my.cnf" "${pos[@]}" "$@" </dev/null >>"$d/stdout.log" 2>&1 &
}

wait_synced() { # wait_synced N...
  local deadline=$((SECONDS + sync_timeout)) n state
  for n in "$@"; do
    while :; do
      state=$(wsrep_var "$n" wsrep_local_state_comment || true)
      [ "$state" = Synced ] && break
      if [ $SECONDS -ge $deadline ]; then
        log "node $n not Synced after ${sync_timeout}s (state: ${state:-no answer}); tail of its log:"
        tail -n 30 "$(dir_of "$n")/error.log" >&2 || true
        return 1
      fi
      if ! pid_of "$n" >/dev/null && [ $((SECONDS % 5)) -eq 0 ]; then
        # mariadbd writes its pid file only once it is up; a node that
        # exited shows in its log.
        if ! pgrep -f -- "--defaults-file=$(dir_of "$n")/my.cnf" >/dev/null; then
          log "node $n exited; tail of its log:"
          tail -n 30 "$(dir_of "$n")/error.log" >&2 || true
          return 1
        fi
      fi
      sleep 0.5
    done
  done
}

check_ports_free() {
  local n p
  for n in 1 2 3; do
    pid_of "$n" >/dev/null && continue
    for p in "$(port_of "$n")" "$(gcomm_of "$n")" $(($(gcomm_of "$n") + 1)) $(($(gcomm_of "$n") + 2)); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        log "port $p is already in use (another cluster? set GALERA_PORT / GALERA_GCOMM_PORT)"
        return 1
      fi
    done
  done
}

up() {
  ensure_packages
  mkdir -p "$base"
  # mysql must reach the data directories (mktemp makes BASEDIR 0700).
  chmod 755 "$base"
  check_ports_free
  local n fresh=0
  for n in 1 2 3; do write_config "$n"; done
  if [ ! -d "$(dir_of 1)/data/mysql" ]; then
    fresh=1
    log "initialising $base"
    mariadb-install-db --defaults-file="$(dir_of 1)/my.cnf" --auth-root-authentication-method=normal \
      --skip-test-db >"$(dir_of 1)/install.log" 2>&1 || { cat "$(dir_of 1)/install.log" >&2; return 1; }
    # Nodes 2 and 3 get all their data from node 1 by SST when they join;
    # they only need a data directory to start in.
    for n in 2 3; do rm -rf "$(dir_of "$n")/data"; mkdir -p "$(dir_of "$n")/data"; done
  fi
  [ "$(id -u)" != 0 ] || chown -R "$run_as:" "$base"/node1 "$base"/node2 "$base"/node3
  local running=0
  for n in 1 2 3; do pid_of "$n" >/dev/null && running=$((running + 1)); done
  if [ $running -eq 0 ]; then
    # Nobody to join: node 1 starts a new cluster from its own state.
    # After a clean `down` every node has a valid grastate; node 1 stopped
    # last, so it is safe to bootstrap.
    [ $fresh -eq 1 ] || sed -i 's/^safe_to_bootstrap: *0/safe_to_bootstrap: 1/' "$(dir_of 1)/data/grastate.dat" 2>/dev/null || true
    log "bootstrapping node 1 (SQL port $(port_of 1))"
    start_node 1 --wsrep-new-cluster
    wait_synced 1
  fi
  for n in 1 2 3; do pid_of "$n" >/dev/null || start_node "$n"; done
  wait_synced 1 2 3
  # Root over TCP from 127.0.0.1 with no password, as the tests connect.
  sql 1 "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS paysvc" >/dev/null || true
  status
}

stop_node() { # stop_node N SIGNAL
  local n=$1 sig=$2 pid
  pid=$(pid_of "$n") || pid=$(pgrep -f -- "--defaults-file=$(dir_of "$n")/my.cnf" | head -n1) || return 0
  [ -n "$pid" ] || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  local i
  for i in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.25
  done
  log "node $n (pid $pid) did not stop on $sig; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

down() {
  # Node 1 last: it is the one `up` bootstraps from.
  local n
  for n in 3 2 1; do stop_node "$n" TERM; done
}

status() {
  local n pid
  for n in 1 2 3; do
    pid=$(pid_of "$n" || echo -)
    printf 'node%s port=%s pid=%s state=%s cluster_size=%s cert_failures=%s bf_aborts=%s\n' "$n" "$(port_of "$n")" "$pid" \
      "$(wsrep_var "$n" wsrep_local_state_comment || echo down)" "$(wsrep_var "$n" wsrep_cluster_size || echo -)" \
      "$(wsrep_var "$n" wsrep_local_cert_failures || echo -)" "$(wsrep_var "$n" wsrep_local_bf_aborts || echo -)"
  done
}

case "$cmd" in
  up) up ;;
  down) down ;;
  destroy) down; rm -rf "$base" ;;
  status) status ;;
  kill) stop_node "$node" KILL ;;
  start) ensure_packages; start_node "$node"; wait_synced "$node" ;;
  deps) ensure_packages ;;
  dsn) echo "root:@tcp(127.0.0.1:$(port_of "$node"))/paysvc?wsrep_sync_wait=1" ;;
  *) usage ;;
esac
