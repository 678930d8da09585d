#!/usr/bin/env bash
# Make sure the servers the test suite starts itself are installed: PgBouncer
# (tests/pg_servers.py, in front of the local PostgreSQL) and redis-server
# (tests/redis_server.py, on free loopback ports).  Idempotent: does nothing when
# both binaries are there.  Installs the missing Debian packages when run as root
# with apt-get, without letting a package start a service of its own.
#
# Without root or apt-get it only says so (exit 0): those tests then skip, or fail
# under --require-db postgres,redis (CI passes it).  Under CI=true a failed
# installation fails this script.
set -euo pipefail

# Debian package -> the binary it installs.
declare -A BINARY=([pgbouncer]=/usr/sbin/pgbouncer [redis-server]=/usr/bin/redis-server)

have() {
  command -v "$(basename "${BINARY[$1]}")" >/dev/null 2>&1 || [ -x "${BINARY[$1]}" ]
}

missing=()
for package in "${!BINARY[@]}"; do
  have "$package" || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-test-servers: ${missing[*]} not installed and this is not root with apt-get;" \
    "install the Debian package(s) to run the tests that need them" >&2
  [ "${CI:-}" = "true" ] && exit 1
  exit 0
fi

# Keep the packages' services down while they are installed (the tests start their own).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
if ! install; then
  apt-get update -q >/dev/null
  install
fi
for package in "${missing[@]}"; do
  have "$package"
  echo "ensure-test-servers: installed $package"
done
