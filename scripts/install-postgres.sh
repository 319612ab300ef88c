#!/usr/bin/env bash
# Installs Debian's PostgreSQL when no initdb is found (where internal/pgserver.Find looks:
# /usr/lib/postgresql/*/bin, then PATH). The postgres_sink tests start their own servers from
# it (testkit/pgtest); nothing is started or enabled here.
set -euo pipefail
for d in /usr/lib/postgresql/*/bin; do
	[ -x "$d/initdb" ] && [ -x "$d/postgres" ] && exit 0
done
command -v initdb >/dev/null && exit 0
[ "$(id -u)" = 0 ] || { echo "PostgreSQL is missing and installing it needs root: apt-get install postgresql"; exit 1; }
echo "installing postgresql"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
