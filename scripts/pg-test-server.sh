#!/usr/bin/env bash
# A private PostgreSQL server for the tests, from Debian's binaries (the postgresql package):
#   pg-test-server.sh start STATE_DIR   initdb + postgres in a fresh temp dir (socket only, no TCP), trust auth;
#                                       writes STATE_DIR/url (a libpq URI of its "postgres" database) and prints it
#   pg-test-server.sh restart STATE_DIR restarts that server (every client connection drops; same URL)
#   pg-test-server.sh stop STATE_DIR    stops the server and removes its files
# As root, the server runs as the `postgres` system user (the package creates it), via runuser.
set -euo pipefail

cmd=${1:-}
state=${2:-}
if [ -z "$cmd" ] || [ -z "$state" ]; then
  echo "usage: $0 start|restart|stop STATE_DIR" >&2
  exit 2
fi
state=$(realpath -m "$state")  # the start cds into the server's temp dir

find_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
  done
  echo "pg-test-server: no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb): install the postgresql package (scripts/install-deps.sh)" >&2
  return 1
}

as_server_user() {
  if [ "$(id -u)" = "0" ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

stop_server() {
  if [ -f "$state/pgdata_dir" ]; then
    local root bin
    root=$(cat "$state/pgdata_dir")
    bin=$(find_bin)
    if [ -d "$root/data" ]; then
      cd /
      as_server_user "$bin/pg_ctl" -D "$root/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$root"
  fi
  rm -rf "$state"
}

start_server() {
  local bin root user
  bin=$(find_bin)
  if [ "$(id -u)" = "0" ] && ! id postgres >/dev/null 2>&1; then
    echo "pg-test-server: running as root and there is no 'postgres' user to run the server as" >&2
    exit 1
  fi
  stop_server
  mkdir -p "$state"
  root=$(mktemp -d /tmp/tinkerd-pg.XXXXXX)
  echo "$root" > "$state/pgdata_dir"
  if [ "$(id -u)" = "0" ]; then chown postgres: "$root"; user=postgres; else user=$(id -un); fi
  cd "$root"  # the server user may not be allowed into the caller's directory (a root-owned checkout)
  as_server_user "$bin/initdb" -D "$root/data" -U "$user" --auth=trust -E UTF8 --no-sync >"$root/initdb.log" 2>&1 ||
    { cat "$root/initdb.log" >&2; exit 1; }
  # Socket only, in the temp dir: nothing else on the machine can collide with or reach it.
  as_server_user "$bin/pg_ctl" -D "$root/data" -l "$root/server.log" -w -t 60 \
    -o "-c listen_addresses='' -k $root -c fsync=off -c max_connections=200" start >/dev/null ||
    { cat "$root/server.log" >&2; exit 1; }
  echo "postgresql:///postgres?host=$root&user=$user" > "$state/url"
  cat "$state/url"
}

restart_server() {
  local root bin
  root=$(cat "$state/pgdata_dir")
  bin=$(find_bin)
  cd "$root"
  as_server_user "$bin/pg_ctl" -D "$root/data" -l "$root/server.log" -m fast -w -t 60 restart >/dev/null ||
    { cat "$root/server.log" >&2; exit 1; }
}

case "$cmd" in
  start) start_server ;;
  restart) restart_server ;;
  stop) stop_server ;;
  *) echo "usage: $0 start|restart|stop STATE_DIR" >&2; exit 2 ;;
esac
