#!/usr/bin/env bash
# Make sure PgBouncer is installed: the test suite starts its own instances of it
# (tests/pg_servers.py) in front of the local PostgreSQL.  Idempotent: does nothing
# when the binary is there.  Installs Debian's package when run as root with
# apt-get, without letting the package start a service of its own.
#
# Without root or apt-get it only says so (exit 0): the tests through PgBouncer
# then skip, or fail under CI=true / --require-db postgres.  Under CI=true a
# failed installation fails this script.
set -euo pipefail

have_pgbouncer() {
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
}

if have_pgbouncer; then
  exit 0
fi

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-pgbouncer: pgbouncer is not installed and this is not root with apt-get;" \
    "install the 'pgbouncer' package to run the tests through it" >&2
  [ "${CI:-}" = "true" ] && exit 1
  exit 0
fi

# Keep the package's service down while it is installed (the tests start their own).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -q --no-install-recommends pgbouncer >/dev/null; }
if ! install; then
  apt-get update -q >/dev/null
  install
fi
have_pgbouncer
echo "ensure-pgbouncer: installed $(/usr/sbin/pgbouncer --version | head -n 1)"
