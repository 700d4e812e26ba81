#!/usr/bin/env bash
# Makes sure a Redis answers on 127.0.0.1:6379 (the optional pre-check of
# README.md, PAYSVC_REDIS_URL=redis://127.0.0.1:6379/0) and that
# redis-server is installed: the tests of internal/precheck start their own
# on free ports, to flush, pause and kill them. Starts one if none answers
# (nothing kept on disk); installs it with apt-get if it is missing.
set -euo pipefail

ping_redis() {
  if command -v redis-cli >/dev/null 2>&1; then
    [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]
  else
    # Without redis-cli: PING over bash's /dev/tcp.
    exec 3<>/dev/tcp/127.0.0.1/6379 2>/dev/null || return 1
    printf 'PING\r\n' >&3
    local reply
    read -r -t 2 reply <&3 || true
    exec 3<&- 3>&-
    [ "${reply%$'\r'}" = "+PONG" ]
  fi
}

if ! command -v redis-server >/dev/null 2>&1; then
  echo "ensure-redis: installing redis-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq redis-server >/dev/null
fi

if ping_redis; then
  echo "ensure-redis: Redis is up on 127.0.0.1:6379"
  exit 0
fi

echo "ensure-redis: starting redis-server on 127.0.0.1:6379"
redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --loglevel warning
for _ in $(seq 1 50); do
  if ping_redis; then
    echo "ensure-redis: Redis is up on 127.0.0.1:6379"
    exit 0
  fi
  sleep 0.1
done
echo "ensure-redis: redis-server did not answer on 127.0.0.1:6379" >&2
exit 1
