#!/usr/bin/python3
"""The kubespray runner's entrypoint: the BPA runner contract (bpa/README.md).

install (the Job): copy the mounted inventory (/inventory: hosts.ini,
group_vars/all/offline.yml, registry-ca.crt and kubespray-pins.yml) and the SSH key (/ssh/id_ed25519,
read-only 0400) into a private work directory; put the registry's site CA
($BPA_REGISTRY_CA) on every inventory host at $BPA_REGISTRY_CA_NODE_PATH (0644, root), where
containerd's mirror configuration (offline.yml) expects it; run
`ansible-playbook -i hosts.ini $BPA_PLAYBOOK` in the kubespray tree with
kubeconfig_localhost=true and the appliance's kubespray pins as extra vars
(-e @$BPA_KUBESPRAY_PINS: the versions and sha256 of what the appliance serves) and
kubespray's download table rendered once beforehand (render_downloads_playbook), then take the admin kubeconfig kubespray
fetched (artifacts/admin.conf), point its server at the first control-plane host and
PATCH it into Secret $BPA_KUBECONFIG_SECRET (key $BPA_KUBECONFIG_SECRET_KEY) in
$BPA_NAMESPACE with the pod's ServiceAccount token. Exit 0 only when the playbook
succeeded and the kubeconfig was written.

Day-2 operations run the same way with $BPA_OPERATION (scale, add-control-plane, remove,
upgrade) and their playbook: $BPA_LIMIT (host names, comma-separated) becomes --limit,
after kubespray's playbooks/facts.yml refreshed every host's facts without it (kubespray's
nodes.md asks for that before a limited run); $BPA_EXTRA_VARS (a JSON object) becomes -e
name=value for each entry (remove-node.yml's node and skip_confirmation). A day-2
operation hands the kubeconfig back when its playbook wrote one (cluster.yml,
upgrade-cluster.yml) and does not need one otherwise. On failure the first failed task, its host
and its message go into the pod's termination message ($BPA_TERMINATION_LOG, default
/dev/termination-log), which the BPA shows in the Provisioning's Failed condition.

addons (the addons Job): helm upgrade --install each addon of the plan ($BPA_ADDONS_PLAN,
JSON: apply [name, chart, version, digest, namespace, values], remove [name, namespace]) against the
application cluster ($BPA_KUBECONFIG), each chart pulled by its digest (chart@digest, never by
its tag: Helm checks the manifest it gets against it) from the appliance's registry verified
with $BPA_REGISTRY_CA, then helm uninstall the removed ones; each addon's result (Installed,
Uninstalled, Failed with the end of Helm's output) is merged into ConfigMap
$BPA_ADDONS_RESULTS as soon as it is known, stamped with $BPA_ADDONS_JOB.

agent (the agent pods): stays up and idle until stopped (the operator runs day-2
operations as Jobs).

Only the standard library: the image has Debian's python3 and kubespray's pinned
Python requirements (ansible, ansible-core, ...).
"""
import base64
import importlib.util
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_REGISTRY_CA_NODE_PATH = "/etc/icn-bootstrap/registry-ca.crt"


def log(message):
    print(f"bpa-runner: {message}", flush=True)


def fail(message, code=1):
    print(f"bpa-runner: error: {message}", file=sys.stderr, flush=True)
    write_termination_message(message)
    sys.exit(code)


def write_termination_message(message):
    """The pod's termination message (what the BPA puts in the Provisioning's Failed condition)."""
    path = os.environ.get("BPA_TERMINATION_LOG", "/dev/termination-log")
    try:
        with open(path, "w") as f:
            f.write(message[:3500])
    except OSError:
        pass  # not in a pod (a test, a shell): the message is on stderr anyway


def env(name, default=None, required=False):
    value = os.environ.get(name, "")
    if value:
        return value
    if required:
        fail(f"{name} is not set (the BPA's install Job sets it; see the runner contract in bpa/README.md)")
    return default


def copy_inventory(source_dir, target_dir):
    """Copies a mounted ConfigMap directory, following its ..data symlinks, skipping its hidden entries."""
    os.makedirs(target_dir, exist_ok=True)
    for name in sorted(os.listdir(source_dir)):
        if name.startswith(".."):
            continue
        src = os.path.join(source_dir, name)
        dst = os.path.join(target_dir, name)
        if os.path.isdir(src):
            copy_inventory(src, dst)
        else:
            shutil.copyfile(src, dst)


def parse_inventory(text):
    """Host variables of every host line, and the members of each group, of an INI inventory."""
    hosts, groups, group = {}, {}, None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip() if not raw.strip().startswith("[") else raw.strip()
        if not line:
            continue
        m = re.match(r"^\[([^\]]+)\]$", line)
        if m:
            group = m.group(1)
            groups.setdefault(group, [])
            continue
        if group and group.endswith(":children"):
            groups[group].append(line)
            continue
        if group and group.endswith(":vars"):
            continue
        parts = line.split()
        name, variables = parts[0], dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        hosts.setdefault(name, {}).update(variables)
        if group:
            groups[group].append(name)
    return hosts, groups


def first_control_plane_address(inventory_text):
    hosts, groups = parse_inventory(inventory_text)
    members = groups.get("kube_control_plane") or groups.get("kube-master") or []
    if not members:
        fail("the inventory has no [kube_control_plane] host")
    first = members[0]
    variables = hosts.get(first, {})
    return variables.get("access_ip") or variables.get("ip") or variables.get("ansible_host") or first


def point_at(kubeconfig, address):
    """Rewrites every cluster server URL's host to `address`, keeping scheme and port."""
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address

    def replace(m):
        return f"{m.group(1)}{m.group(2)}{host}{m.group(4) or ''}"

    return re.sub(r"^(\s*server:\s*)(https?://)(\[[^\]]+\]|[^:/\s]+)(:\d+)?", replace, kubeconfig, flags=re.M)


def patch_object(kind, path, name, body):
    """A JSON merge patch of one object in $BPA_NAMESPACE with the pod's ServiceAccount token
    (its Role allows exactly the objects the runner writes); retried on 5xx, 429 and network errors."""
    namespace = env("BPA_NAMESPACE", required=True)
    sa_dir = env("BPA_SERVICEACCOUNT_DIR", SA_DIR)
    host = env("KUBERNETES_SERVICE_HOST", required=True)
    port = env("KUBERNETES_SERVICE_PORT", "443")
    try:
        token = open(os.path.join(sa_dir, "token")).read().strip()
    except OSError as error:
        fail(f"cannot read the ServiceAccount token in {sa_dir}: {error}")
    context = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
    server = f"[{host}]" if ":" in host else host
    url = f"https://{server}:{port}/api/v1/namespaces/{namespace}/{path}/{name}"
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="PATCH", headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json", "Accept": "application/json"})
    for attempt in range(1, 6):
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:500]
            if error.code < 500 and error.code != 429:
                fail(f"PATCH of {kind} {namespace}/{name} was refused: HTTP {error.code}: {detail}")
            log(f"PATCH of {kind} {namespace}/{name}: HTTP {error.code}; retrying ({attempt}/5)")
        except (urllib.error.URLError, OSError) as error:
            log(f"PATCH of {kind} {namespace}/{name}: {error}; retrying ({attempt}/5)")
        time.sleep(2 * attempt)
    fail(f"could not write {kind} {namespace}/{name}")


def hand_back(kubeconfig):
    secret = env("BPA_KUBECONFIG_SECRET", required=True)
    key = env("BPA_KUBECONFIG_SECRET_KEY", "kubeconfig")
    status = patch_object("Secret", "secrets", secret, {"data": {key: base64.b64encode(kubeconfig.encode()).decode()}})
    log(f"kubeconfig handed back: Secret {env('BPA_NAMESPACE')}/{secret} key {key} (HTTP {status})")


def registry_ca_file(inventory):
    """The mounted site CA (beside hosts.ini unless BPA_REGISTRY_CA says otherwise); fails when it is absent or not PEM."""
    path = env("BPA_REGISTRY_CA", os.path.join(os.path.dirname(inventory), "registry-ca.crt"))
    try:
        with open(path) as f:
            text = f.read()
    except OSError as error:
        fail(f"the registry's site CA {path} is missing from the mounted inventory ({error.strerror}); "
             "the BPA writes it as key registry-ca.crt of the inventory ConfigMap (BPA_REGISTRY_CA): "
             "without it no node can verify the registry, so nothing was run")
    if "-----BEGIN CERTIFICATE-----" not in text:
        fail(f"the registry's site CA {path} holds no PEM certificate (BPA_REGISTRY_CA); nothing was run")
    return path


def put_registry_ca_playbook(work, ca_file, node_path):
    """A two-task playbook (JSON is YAML) that puts the CA on every host: its directory, then the file, 0644 root."""
    play = {
        "name": "Put the registry's site CA on every node (bpa-runner, before the playbook)",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "The CA's directory", "ansible.builtin.file": {"path": os.path.dirname(node_path), "state": "directory"}},
            {"name": f"The CA at {node_path}", "ansible.builtin.copy": {"src": ca_file, "dest": node_path, "owner": "root", "group": "root", "mode": "0644"}},
        ],
    }
    path = os.path.join(work, "put-registry-ca.yml")
    with open(path, "w") as f:
        json.dump([play], f, indent=1)
    return path


def render_downloads_playbook(work, dest):
    """A playbook (JSON is YAML) that renders kubespray's download table (its role default
    `downloads`, every entry's URL, checksum and switches) once, with the run's inventory and
    extra vars, into a JSON file of extra vars. kubespray's download tasks name
    `download_defaults | combine(downloads.<name>)` in every task, and Ansible renders the whole
    table each time (every entry's templates, the checksum tables they index): a fraction of a
    second natively, tens of seconds on an emulated appliance. Rendered once, the table is data.

    It runs on the runner itself, against no node: the appliance serves amd64 only (its pins
    say so), so the architecture facts the table names are that one's."""
    play = {
        "name": "Render kubespray's download table once (bpa-runner, before the playbook)",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_system": "Linux", "ansible_architecture": "x86_64", "host_architecture": "amd64"},
        "roles": ["kubespray_defaults"],
        "tasks": [
            {
                "name": "The download table as extra vars",
                "ansible.builtin.copy": {"content": "{{ {'downloads': downloads} | to_json }}", "dest": dest, "mode": "0600"},
            }
        ],
    }
    path = os.path.join(work, "render-downloads.yml")
    with open(path, "w") as f:
        json.dump([play], f, indent=1)
    return path


def rendered_downloads_args(hosts_ini, work, private_key, kubespray, extra):
    """-e @downloads.json when kubespray's table rendered (see render_downloads_playbook); nothing when it
    did not, and the playbook renders it itself, slower. BPA_RENDER_DOWNLOADS=false turns it off."""
    if env("BPA_RENDER_DOWNLOADS", "true") == "false":
        return []
    dest = os.path.join(work, "downloads.json")
    code, failure = run_playbook(hosts_ini, render_downloads_playbook(work, dest), private_key, kubespray, extra)
    if code != 0 or not os.path.isfile(dest):
        log(f"kubespray's download table was not rendered beforehand (exit code {code}{': ' + failure if failure else ''}); the playbook renders it itself")
        return []
    return ["-e", f"@{dest}"]


def pins_args():
    """-e @pins: kubespray's version and checksum tables are role vars, which only extra vars override."""
    pins = env("BPA_KUBESPRAY_PINS")
    if not pins:
        return []
    if not os.path.isfile(pins):
        fail(f"the kubespray pins {pins} are missing (BPA_KUBESPRAY_PINS); the BPA mounts them beside the inventory: nothing was run")
    return ["-e", f"@{pins}"]


class FailureWatch:
    """Follows ansible-playbook's output (default callback) for the first task that failed: its name, host and message."""

    TASK = re.compile(r"^TASK \[(.+)\] \*+")
    # "fatal: [host]: FAILED! => {...}", and a loop's "failed: [host] (item=...) => {...}".
    FATAL = re.compile(r"^(?:fatal|failed): \[([^\]]+)\](?: \(item=.*?\))?(?:: (FAILED|UNREACHABLE)!)? => (.*)$")

    def __init__(self):
        self.task = None
        self.first = None
        self._pending = None  # (host, kind, lines) while a multi-line result is read

    def feed(self, line):
        if self._pending:
            self._pending[2].append(line)
            if line.rstrip() == "}":
                self._finish()
            return
        m = self.TASK.match(line)
        if m:
            self.task = m.group(1)
            return
        m = self.FATAL.match(line)
        if m and not self.first:
            self._pending = (m.group(1), m.group(2) or "FAILED", [m.group(3)])
            if m.group(3).rstrip().endswith("}") or not m.group(3).strip().startswith("{"):
                self._finish()

    def _finish(self):
        host, kind, lines = self._pending
        self._pending = None
        text = "\n".join(lines)
        try:
            result = json.loads(text)
            detail = result.get("msg") or result.get("stderr") or result.get("reason") or text
            if isinstance(detail, list):
                detail = "; ".join(str(d) for d in detail)
        except (ValueError, AttributeError):
            detail = text
        self.first = {"task": self.task or "?", "host": host, "kind": kind, "detail": " ".join(str(detail).split())[:1500]}

    def describe(self):
        f = self.first
        if not f:
            return None
        what = "unreachable" if f["kind"] == "UNREACHABLE" else "failed"
        return f'task "{f["task"]}" {what} on host {f["host"]}: {f["detail"]}'


OPERATIONS = ("install", "scale", "add-control-plane", "remove", "upgrade")


def operation_args():
    """The operation, its --limit hosts and its extra variables, from the Job's environment."""
    operation = env("BPA_OPERATION", "install")
    if operation not in OPERATIONS:
        fail(f"unknown operation '{operation}' (BPA_OPERATION: one of {', '.join(OPERATIONS)}); nothing was run", 2)
    limit = [h.strip() for h in env("BPA_LIMIT", "").split(",") if h.strip()]
    for host in limit:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", host):
            fail(f"BPA_LIMIT names '{host}', which is not an inventory host name; nothing was run", 2)
    extra = []
    raw = env("BPA_EXTRA_VARS")
    if raw:
        try:
            variables = json.loads(raw)
        except ValueError as error:
            fail(f"BPA_EXTRA_VARS is not JSON ({error}); nothing was run", 2)
        if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
            fail("BPA_EXTRA_VARS must be a JSON object of strings; nothing was run", 2)
        for name, value in sorted(variables.items()):
            extra += ["-e", f"{name}={value}"]
    return operation, limit, extra


def strategy_env():
    """Ansible's strategy: Mitogen's linear (one Python interpreter per host for the whole run,
    instead of a new one, its module archive and an SSH round trip for every task) unless
    BPA_ANSIBLE_STRATEGY names Ansible's own (linear, free)."""
    strategy = env("BPA_ANSIBLE_STRATEGY", "mitogen_linear")
    if not strategy.startswith("mitogen"):
        return {"ANSIBLE_STRATEGY": strategy}
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        fail(f"BPA_ANSIBLE_STRATEGY={strategy}, but Mitogen is not in this image; set BPA_ANSIBLE_STRATEGY=linear")
    plugins = os.path.join(list(spec.submodule_search_locations)[0], "plugins", "strategy")
    return {"ANSIBLE_STRATEGY_PLUGINS": plugins, "ANSIBLE_STRATEGY": strategy}


# An interval of Ansible's own: how often its main process looks for finished tasks
# (default 1 ms). Under emulation the wakeups cost the CPU the tasks need.
INTERNAL_POLL_INTERVAL = "0.01"


def run_playbook(hosts_ini, playbook, private_key, kubespray, extra=()):
    """ansible-playbook in the kubespray tree (its ansible.cfg) with the inventory and the private key
    copy; its output goes on to stdout. Returns the exit code and the first failed task (or None)."""
    command = ["ansible-playbook", "-i", hosts_ini, playbook, "-e", f"ansible_ssh_private_key_file={private_key}", *extra]
    child_env = dict(os.environ)
    child_env.setdefault("ANSIBLE_HOST_KEY_CHECKING", "False")
    child_env.setdefault("ANSIBLE_INTERNAL_POLL_INTERVAL", INTERNAL_POLL_INTERVAL)
    child_env["ANSIBLE_NOCOLOR"] = "1"
    child_env.update(strategy_env())
    log(f"{' '.join(command)} (in {kubespray}; strategy {child_env['ANSIBLE_STRATEGY']})")
    watch = FailureWatch()
    with subprocess.Popen(command, cwd=kubespray, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") as child:
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            watch.feed(line.rstrip("\n"))
    return child.returncode, watch.describe()


def install():
    inventory = env("BPA_INVENTORY", "/inventory/hosts.ini")
    playbook = env("BPA_PLAYBOOK", "cluster.yml")
    key = env("BPA_SSH_KEY", "/ssh/id_ed25519")
    kubespray = env("BPA_KUBESPRAY_DIR", "/kubespray")
    if not os.path.isfile(inventory):
        fail(f"inventory {inventory} is missing (BPA_INVENTORY)")
    if not os.path.isfile(os.path.join(kubespray, playbook)):
        fail(f"playbook {playbook} is not in the kubespray tree {kubespray} (BPA_PLAYBOOK, BPA_KUBESPRAY_DIR)")
    operation, limit, operation_vars = operation_args()
    registry_ca = registry_ca_file(inventory)
    pins = pins_args()
    ca_node_path = env("BPA_REGISTRY_CA_NODE_PATH", DEFAULT_REGISTRY_CA_NODE_PATH)
    if not os.path.isabs(ca_node_path):
        fail(f"BPA_REGISTRY_CA_NODE_PATH {ca_node_path} is not an absolute path (registryCA.nodePath of the BPA configuration)")
    work = tempfile.mkdtemp(prefix="bpa-runner-", dir=env("BPA_WORK_DIR"))
    os.chmod(work, 0o700)
    inventory_dir = os.path.join(work, "inventory")
    copy_inventory(os.path.dirname(inventory), inventory_dir)
    hosts_ini = os.path.join(inventory_dir, os.path.basename(inventory))
    # The mounted key is 0400 and may belong to another user: use a private copy.
    private_key = os.path.join(work, "id_ssh")
    try:
        with open(key, "rb") as src, os.fdopen(os.open(private_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as dst:
            dst.write(src.read())
    except OSError as error:
        fail(f"cannot read the SSH key {key} (BPA_SSH_KEY): {error}")
    log(f"provisioning {env('BPA_PROVISIONING', '?')} {operation} {env('BPA_INSTALL_HASH', '?')[:16]}: {playbook}{' --limit ' + ','.join(limit) if limit else ''}")
    log(f"putting the registry's site CA {registry_ca} on every node at {ca_node_path}")
    code, failure = run_playbook(hosts_ini, put_registry_ca_playbook(work, registry_ca, ca_node_path), private_key, kubespray)
    if code != 0:
        fail(f"could not put the registry's site CA on the nodes at {ca_node_path} (ansible-playbook exit code {code}{': ' + failure if failure else ''}); {playbook} was not run", code)
    artifacts = os.path.join(work, "artifacts")
    common = [*pins, "-e", "kubeconfig_localhost=true", "-e", f"artifacts_dir={artifacts}"]
    common += rendered_downloads_args(hosts_ini, work, private_key, kubespray, [*common, *operation_vars])
    if limit:
        log(f"refreshing every host's facts before the run limited to {','.join(limit)} (playbooks/facts.yml)")
        code, failure = run_playbook(hosts_ini, "playbooks/facts.yml", private_key, kubespray, common)
        if code != 0:
            fail(f"playbooks/facts.yml failed before {playbook}: {failure}" if failure else f"playbooks/facts.yml failed (exit code {code}); {playbook} was not run", code)
    code, failure = run_playbook(hosts_ini, playbook, private_key, kubespray, [*common, *operation_vars, *(["--limit", ",".join(limit)] if limit else [])])
    if code != 0:
        fail(f"{playbook} failed: {failure}" if failure else f"ansible-playbook {playbook} failed (exit code {code}; no failed task in its output)", code)
    admin_conf = os.path.join(artifacts, "admin.conf")
    if not os.path.isfile(admin_conf):
        if operation != "install":
            shutil.rmtree(work, ignore_errors=True)
            log(f"{operation} done ({playbook} wrote no kubeconfig; the one handed back before stays)")
            return
        fail(f"{playbook} succeeded but kubespray wrote no {admin_conf} (kubeconfig_localhost)")
    with open(inventory) as f:
        address = first_control_plane_address(f.read())
    with open(admin_conf) as f:
        kubeconfig = point_at(f.read(), address)
    hand_back(kubeconfig)
    shutil.rmtree(work, ignore_errors=True)
    log(f"{operation} done")


# How long Helm waits for an addon's workloads to be ready before it calls the release failed.
HELM_WAIT = "10m"
# The end of Helm's output that goes into an addon's result (its whole output is in the Job's log).
RESULT_MESSAGE_CHARS = 1000
# The chart digest the BPA recorded for an addon: what Helm installs.
CHART_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def run_helm(command):
    """Runs helm with its output on to stdout; returns (ok, the end of its output)."""
    log(" ".join(command))
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") as child:
        lines = []
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines = (lines + [line.rstrip("\n")])[-20:]
    text = " ".join(l.strip() for l in lines if l.strip())
    return child.returncode == 0, text[-RESULT_MESSAGE_CHARS:]


def addons():
    """The addons Job: helm upgrade --install each addon of the plan, then helm uninstall the
    removed ones, against the application cluster's kubeconfig; each result goes into the
    results ConfigMap as soon as it is known. Exit 0 only when every addon succeeded."""
    plan_path = env("BPA_ADDONS_PLAN", required=True)
    kubeconfig = env("BPA_KUBECONFIG", required=True)
    results = env("BPA_ADDONS_RESULTS", required=True)
    job = env("BPA_ADDONS_JOB", required=True)
    registry_ca = env("BPA_REGISTRY_CA")
    helm = shutil.which("helm")
    if not helm:
        fail("helm is not in this runner image (the addons Job needs the image the build makes with Helm)")
    try:
        with open(plan_path) as f:
            plan = json.load(f)
    except (OSError, ValueError) as error:
        fail(f"cannot read the addons plan {plan_path} (BPA_ADDONS_PLAN): {error}")
    if not os.path.isfile(kubeconfig):
        fail(f"the application cluster's kubeconfig {kubeconfig} (BPA_KUBECONFIG) is missing")
    work = tempfile.mkdtemp(prefix="bpa-addons-", dir=env("BPA_WORK_DIR"))
    failed = []

    def report(name, state, message=""):
        result = {"job": job, "state": state, **({"message": message} if message else {})}
        patch_object("ConfigMap", "configmaps", results, {"data": {name: json.dumps(result)}})
        log(f"addon {name}: {state}{': ' + message if message and state == 'Failed' else ''}")
        if state == "Failed":
            failed.append(name)

    common = ["--kubeconfig", kubeconfig]
    for addon in plan.get("apply", []):
        name = addon["name"]
        digest = addon.get("digest")
        if not isinstance(digest, str) or not CHART_DIGEST.fullmatch(digest):
            report(name, "Failed", f"the plan gives {name} no chart digest (got {json.dumps(digest)}): the addons Job installs charts by digest only; the BPA records one for each addon")
            continue
        values = os.path.join(work, f"{name}.values.json")
        with open(values, "w") as f:
            json.dump(addon.get("values") or {}, f)
        # By digest and without --version: Helm would otherwise resolve the tag too and refuse a moved one.
        command = [helm, "upgrade", "--install", name, f"{addon['chart']}@{digest}", "--namespace", addon["namespace"], "--create-namespace"]
        command += ["--values", values, "--wait=watcher", "--timeout", HELM_WAIT, *common]
        if registry_ca:
            command += ["--ca-file", registry_ca]
        ok, output = run_helm(command)
        report(name, "Installed" if ok else "Failed", "" if ok else output or f"helm upgrade --install {name} failed")
    for addon in plan.get("remove", []):
        name = addon["name"]
        ok, output = run_helm([helm, "uninstall", name, "--namespace", addon["namespace"], "--wait=watcher", "--timeout", HELM_WAIT, "--ignore-not-found", *common])
        report(name, "Uninstalled" if ok else "Failed", "" if ok else output or f"helm uninstall {name} failed")
    shutil.rmtree(work, ignore_errors=True)
    if failed:
        fail(f"addons failed: {', '.join(failed)} (each one's cause is in ConfigMap {results} and the Provisioning's status.addons)")
    log("addons done")


def agent():
    log("agent mode: idle (new nodes and upgrades are not implemented yet); stop with SIGTERM")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


def main(argv):
    mode = argv[1] if len(argv) > 1 else env("BPA_MODE", "install")
    if mode == "install":
        install()
    elif mode == "agent":
        agent()
    elif mode == "addons":
        addons()
    else:
        fail(f"unknown mode '{mode}' (install, addons or agent)", 2)


if __name__ == "__main__":
    main(sys.argv)
