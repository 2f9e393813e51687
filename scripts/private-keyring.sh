#!/usr/bin/env bash
# A private D-Bus session bus with its own unlocked GNOME Keyring (the
# Secret Service the app keeps its Hub token in on Linux), for tests: they
# never see, or write into, the keyring of the desktop they run on.
#
# Prints the bus address (for DBUS_SESSION_BUS_ADDRESS) once the Secret
# Service answers on it, then waits: when its standard input closes (the
# test process that started it exited, however it ended) it stops the bus
# and the keyring and deletes their files. Needs dbus-daemon and
# gnome-keyring-daemon (scripts/setup.sh --app installs them).
set -euo pipefail
for tool in dbus-daemon dbus-send gnome-keyring-daemon; do
  command -v "$tool" >/dev/null || { echo "private-keyring: $tool is missing: run scripts/setup.sh --app" >&2; exit 1; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/vlm-keyring-XXXXXX")
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
dbus-daemon --session --nofork --print-address=1 >"$dir/bus" 2>"$dir/bus.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/bus" ] && break; sleep 0.05; done
[ -s "$dir/bus" ] || { echo "private-keyring: dbus-daemon did not start: $(cat "$dir/bus.log")" >&2; exit 1; }
export DBUS_SESSION_BUS_ADDRESS=$(head -n1 "$dir/bus")
mkdir -p "$dir/data" "$dir/runtime"
chmod 700 "$dir/runtime"
# --unlock reads the login keyring's password from stdin (a throwaway one; an
# empty one creates no login keyring): the keyring is created unlocked and is
# the default collection, so nothing ever asks for a password
printf 'vlm-test' | XDG_DATA_HOME="$dir/data" XDG_RUNTIME_DIR="$dir/runtime" \
  gnome-keyring-daemon --unlock --components=secrets --foreground >"$dir/keyring.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
  if dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
       org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null | grep -q 'boolean true'; then
    echo "$DBUS_SESSION_BUS_ADDRESS"
    # the caller holds our stdin open for as long as it needs the keyring
    cat >/dev/null || true
    exit 0
  fi
  sleep 0.05
done
echo "private-keyring: gnome-keyring-daemon did not start: $(cat "$dir/keyring.log")" >&2
exit 1
