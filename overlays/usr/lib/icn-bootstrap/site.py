#!/usr/bin/python3
"""Site settings of an ICN bootstrap appliance: one validator for the admin's laptop
(`icn-bootstrap site check` runs this file) and the appliance's first boot.

A site folder holds `site.yaml` and an optional `manifests/` folder of Kubernetes
objects. Commands:

  site.py check SITE                  validate; every error on its own line, with its path
  site.py apply SITE --root ROOT      write the appliance's configuration files for it
  site.py objects SITE                list the manifests' files as JSON, each with its kinds and
                                      whether it holds a Secret
  site.py install SITE                the install-to-disk request: "DISK wipe|keep", or nothing
  site.py wipe MEDIUM FILE...         zero FILEs (paths under MEDIUM, a mounted site medium) in place,
                                      then remove them; prints those removed
  site.py scrub MEDIUM                wipe every file that holds a Secret, anywhere on MEDIUM, and zero
                                      its free space (install-to-disk's copy); prints those removed

Exit status: 0 valid, 3 invalid (the errors are on stdout), 1 on other failures.
"""
import argparse
import base64
import errno
import ipaddress
import json
import os
import re
import sys

import yaml

SITE_FILE = "site.yaml"
MANIFESTS = "manifests"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
INVALID = 3

TEMPLATE = """\
# Site settings of an ICN bootstrap appliance (site partition, label ICN-SITE).
# Edit on any computer, then boot the appliance: it applies this file at every boot.
# Check it first: icn-bootstrap site check <this folder>
# Every key is optional; an unknown key is an error. An empty file keeps the defaults.
version: 1

# hostname: site-a-bootstrap

# network:
#   dhcp: true                 # DHCP on wired ports not configured below
#   interfaces:                # static addresses; `name` or `macAddress` picks the port
#     - name: eno1
#       address: 10.10.0.2/24
#       gateway: 10.10.0.1
#   dns: [10.10.0.1]
#   ntp: [10.10.0.1]

# The network on which Metal3/Ironic boot the compute nodes (DHCP and PXE are served
# only there, only when this section is present).
# provisioning:
#   interface: eno2
#   address: 172.22.0.1/24
#   dhcpRange: 172.22.0.10-172.22.0.100
#   masquerade: false          # true: the nodes may reach other networks through the
#                              # appliance, masqueraded behind its address (default: nothing
#                              # is routed between the provisioning network and the others)

# access:
#   sshAuthorizedKeys:
#     - ssh-ed25519 AAAAC3Nza... admin@laptop

# Upgrading in place (icn-upgrade): public keys (PEM, ECDSA P-256) whose signature an
# upgrade image's build report may carry, besides those the image itself trusts.
# upgrade:
#   trustedKeys:
#     - |
#       -----BEGIN PUBLIC KEY-----
#       MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE...
#       -----END PUBLIC KEY-----

# The key that encrypts the bootstrap cluster's Secrets (every cluster's kubeconfig, the
# nodes' SSH key, BMC passwords) in etcd, kept on the data partition (docs/secrets-at-rest.md):
# secrets:
#   key: tpm                   # tpm (default): sealed to this machine's TPM 2.0; the disk
#                              # alone opens nothing. For a machine without a TPM:
#                              # medium: encrypted to an identity on a USB stick the site
#                              # keeps, needed at every boot; passphrase: asked on the console
#                              # at every boot; disk: in clear beside the data (protects
#                              # nothing against a stolen disk)
#   medium: ICN-SECRETS        # with key: medium, the stick's filesystem label
#   tpmPcrs: [7]               # also bound to these PCRs (default [7]: the Secure Boot state
#                              # and its keys; [] for none)
#   recoveryRecipient: age1... # a copy encrypted to the operator's age key (age-keygen): the
#                              # way back on a replaced board

# Install to the server's internal disk at the first boot from the stick, then reboot
# from it (the stick can then be removed). A disk that is not empty is refused unless
# wipe is true. `disk` is a device path or a part of its /dev/disk/by-id name.
# install:
#   disk: /dev/disk/by-id/nvme-SAMSUNG_MZVL2512HCJQ_S675NX0R123456
#   wipe: false

# Kubernetes objects to apply once the BPA is ready (BareMetalHosts, BMC Secrets,
# Provisionings) go into the manifests/ folder beside this file, one or more per file.
# A file that holds a Secret is deleted from this partition once it was applied.
"""


class Loader(yaml.SafeLoader):
    """YAML 1.2 core schema, like the definition's parser: `yes`, `on` and `22:10` stay strings, `010` is ten."""


Loader.yaml_implicit_resolvers = {}
for tag, pattern, first in [
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", list("-+0123456789.")),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
]:
    Loader.add_implicit_resolver(tag, re.compile(pattern), first)


def _int(loader, node):
    text = loader.construct_scalar(node)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


Loader.add_constructor("tag:yaml.org,2002:int", _int)
Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_all(text):
    return list(yaml.load_all(text, Loader=Loader))


def yaml_error(error):
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return f"{where}{getattr(error, 'problem', None) or error}"


# --- the checks -------------------------------------------------------------------------

HOSTNAME = re.compile(r"^(?=.{1,63}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
DNS_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]*[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$", re.IGNORECASE)
INTERFACE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
SSH_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( .*)?$")
PUBLIC_KEY_PEM = re.compile(r"^-----BEGIN PUBLIC KEY-----\n[A-Za-z0-9+/=\n]+-----END PUBLIC KEY-----\n?$")
AGE_RECIPIENT = re.compile(r"^age1[02-9ac-hj-np-z]{58}$")
INSTALL_DISK = re.compile(r"^(/dev/[A-Za-z0-9._:/+-]+|[A-Za-z0-9._:+-]+)$")
K8S_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
FILESYSTEM_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,15}$")
DEFAULT_SECRETS_MEDIUM = "ICN-SECRETS"
SECRETS_KEY_MODES = {
    "tpm": "sealed to this machine's TPM 2.0",
    "medium": "encrypted to an identity on a separate medium the site keeps",
    "passphrase": "encrypted under a passphrase asked at every boot",
    "disk": "in clear beside the data",
}
K8S_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Errors(list):
    def add(self, path, message):
        self.append(f"{path}: {message}")


def type_name(value):
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "a mapping", type(None): "nothing"}.get(type(value), type(value).__name__)


def mapping(errors, path, value, known):
    """The mapping at `path` with only known keys, or None (errors recorded)."""
    if not isinstance(value, dict):
        errors.add(path, f"expected a mapping with {', '.join(known)}, got {type_name(value)}")
        return None
    for key in value:
        if key not in known:
            errors.add(f"{path}.{key}" if path else str(key), f"unknown key (known here: {', '.join(known)})")
    return value


def string(errors, path, value, pattern=None, expected="a string"):
    if not isinstance(value, str) or (pattern and not pattern.match(value)):
        errors.add(path, f"expected {expected}, got {value!r}" if isinstance(value, str) else f"expected {expected}, got {type_name(value)}")
        return None
    return value


def string_list(errors, path, value, check):
    if not isinstance(value, list):
        errors.add(path, f"expected a list, got {type_name(value)}")
        return []
    return [item for i, item in enumerate(value) if check(f"{path}[{i}]", item) is not None]


def interface_address(errors, path, value):
    if not isinstance(value, str) or "/" not in value:
        errors.add(path, f"expected an IPv4 address with its prefix length (e.g. 10.10.0.2/24), got {value!r}")
        return None
    try:
        iface = ipaddress.IPv4Interface(value)
    except ValueError as error:
        errors.add(path, f"not an IPv4 address with prefix length: {error}")
        return None
    if iface.network.prefixlen < 31 and iface.ip in (iface.network.network_address, iface.network.broadcast_address):
        errors.add(path, f"{iface.ip} is the {'network' if iface.ip == iface.network.network_address else 'broadcast'} address of {iface.network}")
        return None
    return iface


def ipv4(errors, path, value):
    if not isinstance(value, str):
        errors.add(path, f"expected an IPv4 address, got {type_name(value)}")
        return None
    try:
        return ipaddress.IPv4Address(value)
    except ValueError:
        errors.add(path, f"expected an IPv4 address, got {value!r}")
        return None


def server(errors, path, value):
    """An NTP server: an IPv4 address or a DNS name."""
    if isinstance(value, str) and re.fullmatch(r"[0-9.]+", value):
        return value if ipv4(errors, path, value) else None
    if isinstance(value, str) and DNS_NAME.match(value):
        return value
    errors.add(path, f"expected an IPv4 address or a host name, got {value!r}")
    return None


def ssh_key(errors, path, value):
    """An OpenSSH public key line whose base64 blob decodes and names the same key type."""
    expected = "an OpenSSH public key line (type, base64 key, optional comment)"
    if string(errors, path, value, SSH_KEY, expected) is None:
        return None
    kind, blob = value.split(" ")[:2]
    try:
        data = base64.b64decode(blob, validate=True)
    except ValueError:
        data = b""
    if data[4 : 4 + len(kind)] != kind.encode():
        errors.add(path, f"expected {expected}, got {value!r}: the key part is not a {kind} key")
        return None
    return value


def public_key(errors, path, value):
    """A PEM public key (the public half of the key the builds are signed with)."""
    if isinstance(value, str) and "PRIVATE KEY" in value:
        errors.add(path, "this is a private key: give its public half (openssl pkey -in sign.key -pubout), and keep the private key off the site partition")
        return None
    return string(errors, path, value, PUBLIC_KEY_PEM, "a PEM public key (-----BEGIN PUBLIC KEY----- ... -----END PUBLIC KEY-----)")


def check_settings(data):
    """The validated settings (defaults filled in) and the list of errors."""
    errors = Errors()
    if data is None:
        data = {}
    top = mapping(errors, "", data, ["version", "hostname", "network", "provisioning", "access", "install", "upgrade", "secrets"])
    if top is None:
        return None, errors
    settings = {"hostname": None, "dhcp": True, "interfaces": [], "dns": [], "ntp": [], "provisioning": None, "sshAuthorizedKeys": [], "install": None, "upgradeTrustedKeys": [], "secrets": {"key": "tpm", "tpmPcrs": [7], "medium": None, "recoveryRecipient": None}}
    if "version" in top and top["version"] != 1:
        errors.add("version", f"this appliance reads version 1, got {top['version']!r}")
    if "hostname" in top:
        settings["hostname"] = string(errors, "hostname", top["hostname"], HOSTNAME, "a host name (lowercase letters, digits and '-', at most 63)")

    used = {}  # interface key -> path, to catch one port configured twice
    if "network" in top:
        network = mapping(errors, "network", top["network"], ["dhcp", "interfaces", "dns", "ntp"]) or {}
        if "dhcp" in network:
            if isinstance(network["dhcp"], bool):
                settings["dhcp"] = network["dhcp"]
            else:
                errors.add("network.dhcp", f"expected true or false, got {network['dhcp']!r}")
        interfaces = network.get("interfaces", [])
        if not isinstance(interfaces, list):
            errors.add("network.interfaces", f"expected a list, got {type_name(interfaces)}")
            interfaces = []
        for i, item in enumerate(interfaces):
            path = f"network.interfaces[{i}]"
            entry = mapping(errors, path, item, ["name", "macAddress", "address", "gateway"])
            if entry is None:
                continue
            port = select_port(errors, path, entry, used)
            address = None
            if "address" in entry:
                address = interface_address(errors, f"{path}.address", entry["address"])
            else:
                errors.add(f"{path}.address", "missing (e.g. 10.10.0.2/24)")
            gateway = None
            if "gateway" in entry:
                gateway = ipv4(errors, f"{path}.gateway", entry["gateway"])
                if gateway and address and gateway not in address.network:
                    errors.add(f"{path}.gateway", f"{gateway} is not in {address.network}, the network of {path}.address")
            if port and address:
                settings["interfaces"].append({**port, "address": str(address), "gateway": str(gateway) if gateway else None})
        if "dns" in network:
            settings["dns"] = [str(a) for a in string_list(errors, "network.dns", network["dns"], lambda p, v: ipv4(errors, p, v))]
        if "ntp" in network:
            settings["ntp"] = string_list(errors, "network.ntp", network["ntp"], lambda p, v: server(errors, p, v))

    if "provisioning" in top:
        prov = mapping(errors, "provisioning", top["provisioning"], ["interface", "address", "dhcpRange", "masquerade"])
        if prov is not None:
            for key in ("interface", "address", "dhcpRange"):
                if key not in prov:
                    errors.add(f"provisioning.{key}", "missing" + {"interface": " (the port facing the compute nodes, e.g. eno2)", "address": " (e.g. 172.22.0.1/24)", "dhcpRange": " (e.g. 172.22.0.10-172.22.0.100)"}[key])
            name = string(errors, "provisioning.interface", prov["interface"], INTERFACE, "an interface name (e.g. eno2)") if "interface" in prov else None
            if name and ("name", name) in used:
                errors.add("provisioning.interface", f"{name} is already configured at {used[('name', name)]}: the provisioning network needs a port of its own")
            address = interface_address(errors, "provisioning.address", prov["address"]) if "address" in prov else None
            first_last = dhcp_range(errors, prov["dhcpRange"], address) if "dhcpRange" in prov else None
            masquerade = prov.get("masquerade", False)
            if not isinstance(masquerade, bool):
                errors.add("provisioning.masquerade", f"expected true or false, got {masquerade!r}")
            elif name and address and first_last:
                settings["provisioning"] = {"interface": name, "address": str(address), "dhcpRange": f"{first_last[0]}-{first_last[1]}", "masquerade": masquerade}

    if "access" in top:
        access = mapping(errors, "access", top["access"], ["sshAuthorizedKeys"]) or {}
        if "sshAuthorizedKeys" in access:
            settings["sshAuthorizedKeys"] = string_list(errors, "access.sshAuthorizedKeys", access["sshAuthorizedKeys"], lambda p, v: ssh_key(errors, p, v))
    if "upgrade" in top:
        upgrade = mapping(errors, "upgrade", top["upgrade"], ["trustedKeys"]) or {}
        if "trustedKeys" in upgrade:
            settings["upgradeTrustedKeys"] = string_list(errors, "upgrade.trustedKeys", upgrade["trustedKeys"], lambda p, v: public_key(errors, p, v))
    if "secrets" in top:
        secrets = mapping(errors, "secrets", top["secrets"], ["key", "tpmPcrs", "medium", "recoveryRecipient"]) or {}
        if "key" in secrets:
            if secrets["key"] in SECRETS_KEY_MODES:
                settings["secrets"]["key"] = secrets["key"]
            else:
                errors.add("secrets.key", f"expected {', '.join(f'{mode} ({what})' for mode, what in SECRETS_KEY_MODES.items())}, got {secrets['key']!r}")
        if settings["secrets"]["key"] == "medium":
            settings["secrets"]["medium"] = DEFAULT_SECRETS_MEDIUM
        if "medium" in secrets:
            label = string(errors, "secrets.medium", secrets["medium"], FILESYSTEM_LABEL, "a filesystem label (letters, digits, '-' and '_', at most 16; e.g. ICN-SECRETS)")
            if settings["secrets"]["key"] != "medium":
                errors.add("secrets.medium", "only with key: medium")
            elif label:
                settings["secrets"]["medium"] = label
        if "tpmPcrs" in secrets:
            pcrs = secrets["tpmPcrs"]
            if not isinstance(pcrs, list) or not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= 23 for p in pcrs):
                errors.add("secrets.tpmPcrs", f"expected a list of PCR numbers 0-23 (e.g. [7]), got {pcrs!r}")
            elif settings["secrets"]["key"] != "tpm" and pcrs:
                errors.add("secrets.tpmPcrs", "only with key: tpm")
            else:
                settings["secrets"]["tpmPcrs"] = sorted(set(pcrs))
        if "recoveryRecipient" in secrets:
            settings["secrets"]["recoveryRecipient"] = string(errors, "secrets.recoveryRecipient", secrets["recoveryRecipient"], AGE_RECIPIENT, "an age public key (age1..., as age-keygen prints it)")
    if "install" in top:
        install = mapping(errors, "install", top["install"], ["disk", "wipe"])
        if install is not None:
            disk = None
            if "disk" not in install:
                errors.add("install.disk", "missing (a device such as /dev/nvme0n1 or /dev/disk/by-id/..., or a part of its /dev/disk/by-id name)")
            else:
                disk = string(errors, "install.disk", install["disk"], INSTALL_DISK, "a device path under /dev (e.g. /dev/sda, /dev/disk/by-id/ata-...) or a part of a /dev/disk/by-id name (e.g. Samsung_SSD_870)")
            wipe = install.get("wipe", False)
            if not isinstance(wipe, bool):
                errors.add("install.wipe", f"expected true or false, got {wipe!r}")
            elif disk:
                settings["install"] = {"disk": disk, "wipe": wipe}
    return (settings if not errors else None), errors


def select_port(errors, path, entry, used):
    has_name, has_mac = "name" in entry, "macAddress" in entry
    if has_name == has_mac:
        errors.add(path, "give exactly one of name (e.g. eno1) and macAddress (e.g. 52:54:00:12:34:56)")
        return None
    if has_name:
        key = ("name", string(errors, f"{path}.name", entry["name"], INTERFACE, "an interface name (e.g. eno1)"))
    else:
        value = entry["macAddress"]
        key = ("macAddress", string(errors, f"{path}.macAddress", value.lower() if isinstance(value, str) else value, MAC, "a MAC address (e.g. 52:54:00:12:34:56)"))
    if key[1] is None:
        return None
    if key in used:
        errors.add(path, f"{key[1]} is already configured at {used[key]}")
        return None
    used[key] = path
    return {key[0]: key[1]}


def dhcp_range(errors, value, address):
    path = "provisioning.dhcpRange"
    parts = value.split("-") if isinstance(value, str) else []
    if len(parts) != 2:
        errors.add(path, f"expected FIRST-LAST (e.g. 172.22.0.10-172.22.0.100), got {value!r}")
        return None
    first, last = ipv4(errors, path, parts[0].strip()), ipv4(errors, path, parts[1].strip())
    if not (first and last):
        return None
    if first > last:
        errors.add(path, f"{first} comes after {last}")
        return None
    if address:
        outside = [str(a) for a in (first, last) if a not in address.network]
        if outside:
            errors.add(path, f"{' and '.join(outside)} not in {address.network}, the network of provisioning.address")
            return None
        if first <= address.ip <= last:
            errors.add(path, f"contains the appliance's own provisioning address {address.ip}")
            return None
    return first, last


SECRET_KINDS = ("Secret", "SecretList")
# For a file that cannot be parsed: its text alone tells whether it may hold a Secret.
SECRET_TEXT = re.compile(r"""["']?\bkind["']?\s*:\s*["']?Secret(List)?\b""")


def json_stream(text):
    """The JSON values of a text, one after another (kubectl reads a file of several)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return values
        value, at = decoder.raw_decode(text, at)
        values.append(value)


def parse_manifest(text, name=""):
    """A manifest file's documents: YAML, or JSON (which YAML refuses when indented with tabs).
    Raises the YAML error, or the JSON one for a .json file."""
    try:
        return [d for d in load_all(text) if d is not None]
    except yaml.YAMLError as yaml_failure:
        try:
            return json_stream(text)
        except ValueError as json_failure:
            raise (json_failure if name.endswith(".json") else yaml_failure) from None


def is_list(doc):
    """A List, a SecretList, any *List: kubectl applies its items."""
    return isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list)


def holds_secret(value, seen=None):
    """Whether parsed manifests hold a Secret anywhere (a List's items, a document among
    others, nested): the whole file is then treated as secret."""
    seen = set() if seen is None else seen
    if id(value) in seen:  # YAML aliases can make cycles
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        return value.get("kind") in SECRET_KINDS or any(holds_secret(v, seen) for v in value.values())
    if isinstance(value, list):
        return any(holds_secret(v, seen) for v in value)
    return False


def text_holds_secret(text):
    try:
        return holds_secret(parse_manifest(text))
    except (yaml.YAMLError, ValueError, RecursionError):
        return bool(SECRET_TEXT.search(text))


def check_manifests(site):
    """[{file, kinds, secret}] of the manifests folder, and the errors (paths relative to the site folder)."""
    errors = Errors()
    folder = os.path.join(site, MANIFESTS)
    files = []
    if not os.path.isdir(folder):
        return files, errors
    for name in sorted(os.listdir(folder)):
        path = f"{MANIFESTS}/{name}"
        full = os.path.join(folder, name)
        if name.startswith(".") or not os.path.isfile(full) or name.upper().startswith("README"):
            continue
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            errors.add(path, "file names may hold only letters, digits, '.', '_' and '-'")
            continue
        if not name.endswith(MANIFEST_SUFFIXES):
            errors.add(path, f"not a manifest file (expected {', '.join(MANIFEST_SUFFIXES)})")
            continue
        try:
            with open(full, encoding="utf-8") as handle:
                documents = parse_manifest(handle.read(), name)
        except yaml.YAMLError as error:
            errors.add(path, yaml_error(error))
            continue
        except UnicodeDecodeError as error:
            errors.add(path, f"not UTF-8 text: {error}")
            continue
        except ValueError as error:
            errors.add(path, f"not JSON: {error}")
            continue
        kinds = []
        for i, doc in enumerate(documents):
            where = f"{path}: document {i + 1}" if len(documents) > 1 else path
            for j, obj in enumerate(doc["items"] if is_list(doc) else [doc]):
                at = f"{where}: items[{j}]" if is_list(doc) else where
                if not isinstance(obj, dict):
                    errors.add(at, f"expected a Kubernetes object (a mapping), got {type_name(obj)}")
                    continue
                for key in ("apiVersion", "kind"):
                    if not isinstance(obj.get(key), str) or not obj.get(key):
                        errors.add(f"{at}: {key}", "missing" if key not in obj else f"expected a string, got {obj.get(key)!r}")
                meta = obj.get("metadata")
                if not isinstance(meta, dict):
                    errors.add(f"{at}: metadata", "missing" if meta is None else f"expected a mapping, got {type_name(meta)}")
                else:
                    string(errors, f"{at}: metadata.name", meta.get("name"), K8S_NAME, "a Kubernetes name (lowercase letters, digits, '-' and '.')")
                    if "namespace" in meta:
                        string(errors, f"{at}: metadata.namespace", meta["namespace"], K8S_LABEL, "a namespace name (lowercase letters, digits and '-')")
                if isinstance(obj.get("kind"), str):
                    kinds.append(obj["kind"])
        if not documents:
            errors.add(path, "holds no object")
        files.append({"file": path, "kinds": kinds, "secret": holds_secret(documents)})
    return files, errors


def load_site(site):
    """(settings, manifest files, errors) of a site folder (or a site.yaml path)."""
    if os.path.isfile(site):
        site = os.path.dirname(os.path.abspath(site))
    path = os.path.join(site, SITE_FILE)
    errors = Errors()
    if not os.path.isfile(path):
        errors.add(SITE_FILE, f"missing in {site} (icn-bootstrap site init makes one)")
        return None, [], errors
    try:
        with open(path, encoding="utf-8") as handle:
            documents = load_all(handle.read())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        errors.add(SITE_FILE, yaml_error(error) if isinstance(error, yaml.YAMLError) else f"not UTF-8 text: {error}")
        return None, [], errors
    if len(documents) > 1:
        errors.add(SITE_FILE, f"holds {len(documents)} YAML documents, expected one")
        return None, [], errors
    settings, site_errors = check_settings(documents[0] if documents else None)
    errors.extend(site_errors)
    files, manifest_errors = check_manifests(site)
    errors.extend(manifest_errors)
    return (settings if not errors else None), files, errors


# --- what the appliance writes ----------------------------------------------------------

GENERATED = "# Written by icn-site from the site partition's site.yaml at boot: edit that file, not this one.\n"


def config_files(settings):
    """{path under the root: text} of every file the settings make; None removes the file."""
    files = {}
    networks = []
    for i, iface in enumerate(settings["interfaces"]):
        match = f"Name={iface['name']}" if "name" in iface else f"MACAddress={iface['macAddress']}"
        body = f"[Match]\n{match}\n\n[Network]\nAddress={iface['address']}\n"
        if iface["gateway"]:
            body += f"Gateway={iface['gateway']}\n"
        body += "".join(f"DNS={d}\n" for d in settings["dns"])
        networks.append((f"08-icn-site-{i}.network", body))
    prov = settings["provisioning"]
    if prov:
        # No DHCP client and no default route there: the appliance is the network's DHCP server.
        networks.append(("07-icn-site-provisioning.network", f"[Match]\nName={prov['interface']}\n\n[Network]\nAddress={prov['address']}\nDHCP=no\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"))
    for name, body in networks:
        files[f"etc/systemd/network/{name}"] = GENERATED + body
    if not settings["dhcp"]:
        files["etc/systemd/network/19-icn-site-no-dhcp.network"] = GENERATED + "[Match]\nType=ether\nKind=!*\n\n[Network]\nDHCP=no\nLinkLocalAddressing=ipv6\n"
    if settings["dns"]:
        files["etc/systemd/resolved.conf.d/icn-site.conf"] = GENERATED + "[Resolve]\nDNS=" + " ".join(settings["dns"]) + "\n"
    if settings["ntp"]:
        files["etc/chrony/sources.d/icn-site.sources"] = GENERATED + "".join(f"server {s} iburst\n" for s in settings["ntp"])
    if settings["sshAuthorizedKeys"]:
        files["etc/icn-bootstrap/site/authorized_keys"] = "".join(f"{k}\n" for k in settings["sshAuthorizedKeys"])
    if settings["upgradeTrustedKeys"]:
        files["etc/icn-bootstrap/site/upgrade-trusted-keys.pem"] = "".join(k if k.endswith("\n") else k + "\n" for k in settings["upgradeTrustedKeys"])
    if settings["hostname"]:
        files["etc/icn-bootstrap/site/hostname"] = settings["hostname"] + "\n"
    env = GENERATED
    if prov:
        env += f"ICN_PROVISIONING_INTERFACE={prov['interface']}\nICN_PROVISIONING_ADDRESS={prov['address']}\nICN_PROVISIONING_DHCP_RANGE={prov['dhcpRange']}\n"
        env += f"ICN_PROVISIONING_MASQUERADE={'true' if prov['masquerade'] else 'false'}\n"
    secrets = settings["secrets"]
    env += f"ICN_SECRETS_KEY={secrets['key']}\n"
    if secrets["key"] == "tpm":
        env += f"ICN_SECRETS_TPM_PCRS={'+'.join(str(p) for p in secrets['tpmPcrs']) or 'none'}\n"
    if secrets["key"] == "medium":
        env += f"ICN_SECRETS_MEDIUM_LABEL={secrets['medium']}\n"
    if secrets["recoveryRecipient"]:
        env += f"ICN_SECRETS_RECOVERY_RECIPIENT={secrets['recoveryRecipient']}\n"
    files["etc/icn-bootstrap/site/site.env"] = env
    return files


def secrets_explained(secrets):
    """What the site's choice for the Secrets' key protects, in a line or two."""
    if secrets["key"] == "disk":
        text = "secrets.key: disk: the key of the cluster's Secrets lies in clear on the data partition: a stolen disk or a copy of it opens every Secret; choose tpm on a machine with a TPM 2.0, or medium or passphrase"
    elif secrets["key"] == "medium":
        text = f"secrets.key: medium: the key of the cluster's Secrets is encrypted to an identity on the medium labelled {secrets['medium']}: the disk alone opens nothing; every boot waits (10 min) for that medium, the site keeps it apart from the server (and a copy)"
    elif secrets["key"] == "passphrase":
        text = "secrets.key: passphrase: the key of the cluster's Secrets is encrypted under a passphrase (scrypt) asked on the console at the first boot and at every boot after: the disk alone opens nothing; no boot (nor an upgrade's trial boot) reaches Kubernetes until someone types it"
    else:
        pcrs = f" and to PCR {'+'.join(str(p) for p in secrets['tpmPcrs'])}" if secrets["tpmPcrs"] else " (to no PCR)"
        text = f"secrets.key: tpm: the key of the cluster's Secrets is sealed to this machine's TPM 2.0{pcrs}: the disk alone opens nothing; a machine without a TPM stops before Kubernetes starts"
    if secrets["recoveryRecipient"]:
        text += f"; a copy is encrypted to {secrets['recoveryRecipient']} (the operator's way back)"
    elif secrets["key"] != "disk":
        lost = {"tpm": "a replaced board", "medium": "a lost medium", "passphrase": "a forgotten passphrase"}[secrets["key"]]
        text += f"; no secrets.recoveryRecipient: {lost} needs a backup (icn-backup) to get the Secrets back"
    return text


# Every path a site may write: apply removes those the current settings do not make.
MANAGED_GLOBS = ["etc/systemd/network/0[78]-icn-site-*.network", "etc/systemd/network/19-icn-site-no-dhcp.network", "etc/systemd/resolved.conf.d/icn-site.conf", "etc/chrony/sources.d/icn-site.sources", "etc/icn-bootstrap/site/authorized_keys", "etc/icn-bootstrap/site/upgrade-trusted-keys.pem", "etc/icn-bootstrap/site/hostname", "etc/icn-bootstrap/site/site.env"]


def apply(settings, root):
    import glob

    wanted = config_files(settings) if settings else {}
    for pattern in MANAGED_GLOBS:
        for path in glob.glob(os.path.join(root, pattern)):
            if os.path.relpath(path, root) not in wanted:
                os.remove(path)
    for rel, text in sorted(wanted.items()):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return sorted(wanted)


def overwrite(path):
    """Zeros a file's bytes where they lie, then removes it. A removed file's clusters keep
    its bytes; opened without truncation, FAT writes into the same clusters (a truncate
    may free them and allocate others)."""
    size = os.path.getsize(path)
    zeros = bytes(min(size, 1 << 20))
    fd = os.open(path, os.O_WRONLY)
    try:
        done = 0
        while done < size:
            done += os.pwrite(fd, zeros[: size - done], done)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.remove(path)


def wipe(medium, files):
    """Overwrites, then removes each file (relative to the mounted medium) that exists; returns those removed."""
    removed = []
    for rel in files:
        path = os.path.join(medium, rel)
        if os.path.isfile(path):
            overwrite(path)
            removed.append(rel)
    os.sync()
    return removed


def scrub(medium):
    """Makes a copy of the site partition (the installed disk's) hold no Secret: wipes every
    file that holds one, wherever it lies and whether or not the site is valid, then zeros
    the free space, whose clusters may still hold files deleted before (on a laptop, or by
    an appliance older than the wiping). Returns the files wiped."""
    found = []
    for folder, _, names in os.walk(medium):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                if text_holds_secret(handle.read().decode("utf-8", errors="replace")):
                    found.append(os.path.relpath(path, medium))
    removed = wipe(medium, sorted(found))
    stat = os.statvfs(medium)
    free = min(stat.f_bavail * stat.f_frsize, (4 << 30) - 1)  # FAT's largest file
    filler = os.path.join(medium, ".icn-free-space")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        zeros = bytes(1 << 20)
        done = 0
        while done < free:
            try:
                done += os.write(fd, zeros[: free - done])
            except OSError as error:
                if error.errno not in (errno.ENOSPC, errno.EFBIG):
                    raise
                break
        os.fsync(fd)
    finally:
        os.close(fd)
        os.remove(filler)
    os.sync()
    return removed


def main(argv):
    parser = argparse.ArgumentParser(prog="site.py", description="ICN bootstrap site settings")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check").add_argument("site")
    apply_cmd = commands.add_parser("apply")
    apply_cmd.add_argument("site", nargs="?")
    apply_cmd.add_argument("--root", required=True)
    apply_cmd.add_argument("--defaults", action="store_true", help="remove every file a site wrote (no site, or an invalid one)")
    commands.add_parser("objects").add_argument("site")
    commands.add_parser("template")
    commands.add_parser("install").add_argument("site")
    wipe_cmd = commands.add_parser("wipe")
    wipe_cmd.add_argument("medium")
    wipe_cmd.add_argument("files", nargs="+")
    commands.add_parser("scrub").add_argument("medium")
    args = parser.parse_args(argv)

    if args.command == "template":
        sys.stdout.write(TEMPLATE)
        return 0
    if args.command in ("wipe", "scrub"):
        for rel in wipe(args.medium, args.files) if args.command == "wipe" else scrub(args.medium):
            print(rel)
        return 0
    if args.command == "apply" and args.defaults:
        apply(None, args.root)
        return 0
    settings, files, errors = load_site(args.site)
    if errors:
        for line in errors:
            print(line)
        return INVALID
    if args.command == "check":
        kinds = sum(len(f["kinds"]) for f in files)
        print(f"valid: {SITE_FILE}" + (f" and {kinds} object{'s' if kinds != 1 else ''} in {len(files)} file{'s' if len(files) != 1 else ''} under {MANIFESTS}/" if files else ""))
        print(secrets_explained(settings["secrets"]))
        return 0
    if args.command == "objects":
        print(json.dumps(files))
        return 0
    if args.command == "install":
        if settings["install"]:
            print(f"{settings['install']['disk']} {'wipe' if settings['install']['wipe'] else 'keep'}")
        return 0
    for rel in apply(settings, args.root):
        print(f"wrote /{rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
