#!/usr/bin/env bash
# Makes sure a MariaDB (or MySQL) server answers on 127.0.0.1:3306 as root
# with an empty password, as the tests and `go run ./cmd/demo` expect: starts it if
# it is installed and stopped, installs it with apt-get if it is missing.
# Set PAYSVC_TEST_DSN to point the tests at another server instead.
set -euo pipefail

ping_tcp() { mariadb-admin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1 \
  || mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1; }

if [ -n "${PAYSVC_TEST_DSN:-}" ]; then
  echo "ensure-mariadb: PAYSVC_TEST_DSN is set; using that server"
  exit 0
fi
# The test suite runs many databases in parallel, and the fault suite
# several server processes, each with a pool of up to 32 connections: the
# default limit of 151 is too low for all of them at once.
raise_limits() {
  mariadb --protocol=tcp -h127.0.0.1 -P3306 -uroot -e 'SET GLOBAL max_connections = GREATEST(@@max_connections, 1000)' \
    || echo "ensure-mariadb: could not raise max_connections (continuing)" >&2
}

if ping_tcp; then
  echo "ensure-mariadb: MariaDB is up"
  raise_limits
  exit 0
fi

if [ ! -x /usr/sbin/mariadbd ] && [ ! -x /usr/sbin/mysqld ]; then
  echo "ensure-mariadb: installing mariadb-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq mariadb-server mariadb-client >/dev/null
fi

install -d -o mysql -g mysql /run/mysqld 2>/dev/null || true
if [ ! -d /var/lib/mysql/mysql ]; then
  mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
fi
daemon=/usr/sbin/mariadbd
[ -x "$daemon" ] || daemon=/usr/sbin/mysqld
echo "ensure-mariadb: starting $daemon"
start-stop-daemon --start --oknodo --background --exec "$daemon" -- --user=mysql

for _ in $(seq 1 60); do
  if mariadb-admin -uroot ping >/dev/null 2>&1; then break; fi
  sleep 1
done

# A fresh Debian install authenticates root by unix socket only; the tests
# connect over TCP with an empty password.
if ! ping_tcp; then
  mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; FLUSH PRIVILEGES;" || true
fi
for _ in $(seq 1 30); do
  if ping_tcp; then echo "ensure-mariadb: MariaDB is up"; raise_limits; exit 0; fi
  sleep 1
done
echo "ensure-mariadb: MariaDB did not come up on 127.0.0.1:3306" >&2
exit 1
