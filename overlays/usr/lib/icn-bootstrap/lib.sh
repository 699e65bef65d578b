# Shared by the first-boot steps. Each step is idempotent: it records completion in a
# stamp under /var/lib/icn-bootstrap/, written only after the step's work is durable,
# so a power cut mid-step simply re-runs it at the next boot.
STAMPS=${ICN_BOOTSTRAP_STAMPS:-/var/lib/icn-bootstrap}
mkdir -p "$STAMPS"

stamp() { sync; touch "$STAMPS/$1.done"; sync; }
done_already() { [ -e "$STAMPS/$1.done" ]; }

# Writes a line on the serial console and the screen (whichever exist).
say() {
  for tty in /dev/ttyS0 /dev/tty0; do
    [ -w "$tty" ] && printf '%s\r\n' "$*" > "$tty" 2>/dev/null || true
  done
  echo "$*"
}

# Runs a command until it succeeds, 30 tries 10 s apart. The API server of a slow or busy
# machine drops a connection now and then (TLS handshake timeout): one such moment must
# not fail the first boot, whose retry would need a reboot.
retry() {
  tries=1
  until "$@"; do
    [ "$tries" -lt 30 ] || return 1
    echo "icn-bootstrap: failed (try $tries of 30), again in 10 s: $*" >&2
    tries=$((tries + 1))
    sleep 10
  done
}
