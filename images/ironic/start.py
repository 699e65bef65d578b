#!/usr/bin/python3
"""Starts the appliance's Ironic (images/ironic/recipe.yaml).

1. The API's basic-auth file from the credentials Secret mounted at
   $IRONIC_CREDENTIALS_DIR (username, password: made at the appliance's first boot,
   shared with the baremetal-operator), bcrypt-hashed; never part of the image.
2. The addresses: Ironic's own (my_ip, where nodes reach it) is $IRONIC_IP, else the
   appliance's address on the provisioning network ($PROVISIONING_ADDRESS, from the
   site's settings), else the address of the default route's interface, else
   $IRONIC_NODE_IP (the node's address, from the pod's status, on a site without a
   default route); the API listens on $IRONIC_LISTEN_IP
   (default: every address; basic auth guards all but the agent's lookup/heartbeat).
3. The EFI system partition image for UEFI virtual-media ISOs (make-esp), then Ironic
   (API + conductor), which first creates its database schema (SQLite: created, or
   upgraded when it exists) in the same process: a separate ironic-dbsync run imported
   most of Ironic a second time, which costs minutes on an emulated appliance.
Each step's time is printed.
"""
import os
import socket
import subprocess
import sys
import time

import bcrypt

CONF = "/etc/ironic/ironic.conf"
state = os.environ.get("IRONIC_STATE_DIR", "/var/lib/ironic")
creds = os.environ.get("IRONIC_CREDENTIALS_DIR", "/auth/ironic")


def fail(message):
    print(f"ironic-start: {message}", file=sys.stderr)
    sys.exit(2)


started = time.monotonic()


def progress(message):
    print(f"ironic-start: {message} ({time.monotonic() - started:.1f} s)", flush=True)


def read_secret(name):
    path = os.path.join(creds, name)
    try:
        with open(path) as f:
            value = f.read().strip()
    except OSError as e:
        fail(f"cannot read the API credentials ({path}: {e.strerror}); mount Secret ironic-credentials (keys username, password) there")
    if not value:
        fail(f"{path} is empty; Secret ironic-credentials needs a username and a password")
    return value


def default_route_address():
    # A UDP connect sends nothing: it only asks the kernel which source address it would use.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return None


for sub in ("html", "html/tmp", "tftpboot", "lock", "tmp", "deploy-logs"):
    os.makedirs(os.path.join(state, sub), exist_ok=True)

user, password = read_secret("username"), read_secret("password")
# The fewest rounds bcrypt allows: the password is made of 24 random bytes (no dictionary
# to slow down), and the API checks the hash on every request the baremetal-operator
# makes; at the default 12 rounds each check cost seconds of an emulated CPU.
hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
tmp = os.path.join(state, ".htpasswd.tmp")
with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    f.write(f"{user}:{hashed}\n")
os.replace(tmp, os.path.join(state, "htpasswd"))

provisioning = os.environ.get("PROVISIONING_ADDRESS", "").split("/")[0]
ip = os.environ.get("IRONIC_IP") or provisioning or default_route_address() or os.environ.get("IRONIC_NODE_IP")
if not ip:
    fail("no address for Ironic: set IRONIC_IP (there is no default route to take it from, and no IRONIC_NODE_IP)")
http_port = os.environ.get("IRONIC_HTTP_PORT", "6180")
api_port = os.environ.get("OS_API__PORT", "6385")
env = dict(os.environ)
env.setdefault("OS_DEFAULT__MY_IP", ip)
env.setdefault("OS_API__HOST_IP", os.environ.get("IRONIC_LISTEN_IP", "0.0.0.0"))
env.setdefault("OS_DEPLOY__HTTP_URL", f"http://{ip}:{http_port}")
env.setdefault("OS_SERVICE_CATALOG__ENDPOINT_OVERRIDE", f"http://{ip}:{api_port}")
print(f"ironic-start: my_ip {env['OS_DEFAULT__MY_IP']}, API on {env['OS_API__HOST_IP']}:{api_port}, boot files at {env['OS_DEPLOY__HTTP_URL']}", flush=True)

# Made at each start from the image's GRUB, so it always matches the image (a second, no secret in it).
env.setdefault("OS_DEFAULT__ESP_IMAGE", os.path.join(state, "uefi-esp.img"))
esp = subprocess.run(["/usr/local/bin/make-esp", env["OS_DEFAULT__ESP_IMAGE"]], env=env)
if esp.returncode != 0:
    fail(f"make-esp failed (exit {esp.returncode}): UEFI hosts could not boot by Redfish virtual media; see the lines above")
progress("EFI system partition image made")

# A new SQLite database gets the current schema at once (SQLite cannot replay every
# migration); an existing one (a restarted container on the same volume) is upgraded.
env["ICN_IRONIC_SCHEMA"] = "upgrade" if os.path.exists(os.path.join(state, "ironic.sqlite")) else "create_schema"

RUN_IRONIC = """
import sys
import ironic.command  # first: it selects oslo.service's threading backend

# The schema, right after Ironic has read its configuration (what ironic-dbsync does,
# without a second interpreter importing Ironic again).
import os, time
from ironic.common import service as ironic_service
_prepare_service = ironic_service.prepare_service
def prepare_service(*args, **kwargs):
    result = _prepare_service(*args, **kwargs)
    from ironic.db import migration
    action = os.environ["ICN_IRONIC_SCHEMA"]
    began = time.monotonic()
    try:
        migration.create_schema() if action == "create_schema" else migration.upgrade(None)
    except Exception as e:
        print(f"ironic-start: the database schema ({action}) failed: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    print(f"ironic-start: database schema {action} done in {time.monotonic() - began:.1f} s", flush=True)
    return result
ironic_service.prepare_service = prepare_service
from ironic.command.singleprocess import main
sys.argv = ["ironic", "--config-file", sys.argv[1]]
sys.exit(main())
"""
progress("starting Ironic")
os.execve(sys.executable, [sys.executable, "-c", RUN_IRONIC, CONF], env)
