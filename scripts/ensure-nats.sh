#!/usr/bin/env bash
# Makes sure a NATS server with JetStream answers on 127.0.0.1:4222, for the
# demo and for PAYSVC_NATS_URL=nats://127.0.0.1:4222: starts `nats-server
# -js` (store in $NATS_STORE_DIR, default /tmp/paysvc-nats) if nothing
# answers, installs Debian's nats-server if it is missing. The tests of
# internal/natsintake do not use it: each starts its own nats-server -js on a
# free port, since some of them kill and restart their broker.
set -euo pipefail

answers() { (exec 3<>/dev/tcp/127.0.0.1/4222 && head -c 4 <&3 | grep -q INFO) 2>/dev/null; }

if answers; then
  echo "ensure-nats: NATS is up on 127.0.0.1:4222"
  exit 0
fi
if ! command -v nats-server >/dev/null 2>&1; then
  echo "ensure-nats: installing nats-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq nats-server >/dev/null
fi
store="${NATS_STORE_DIR:-/tmp/paysvc-nats}"
mkdir -p "$store"
nohup nats-server -js -a 127.0.0.1 -p 4222 -sd "$store" >"$store/nats-server.log" 2>&1 &
for _ in $(seq 1 50); do
  if answers; then
    echo "ensure-nats: started nats-server -js on 127.0.0.1:4222 (store $store)"
    exit 0
  fi
  sleep 0.2
done
echo "ensure-nats: nats-server did not answer on 127.0.0.1:4222; see $store/nats-server.log" >&2
exit 1
