#!/usr/bin/env bash
# Make sure redis-server is installed: the test suite starts its own instances of
# it (tests/redis_server.py) on free loopback ports, for the RedisStore suites.
# Idempotent: does nothing when the binary is there.  Installs Debian's package
# when run as root with apt-get, without letting the package start a service of
# its own.
#
# Without root or apt-get it only says so (exit 0): the Redis tests then skip, or
# fail under --require-db redis (CI passes it).  Under CI=true a failed
# installation fails this script.
set -euo pipefail

have_redis() {
  command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]
}

if have_redis; then
  exit 0
fi

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-redis: redis-server is not installed and this is not root with apt-get;" \
    "install the 'redis-server' package to run the Redis tests" >&2
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
install() { apt-get install -y -q --no-install-recommends redis-server >/dev/null; }
if ! install; then
  apt-get update -q >/dev/null
  install
fi
have_redis
echo "ensure-redis: installed $(redis-server --version | head -n 1)"
