/**
 * The site validator (overlays/usr/lib/icn-bootstrap/site.py), run as `icn-bootstrap site`
 * runs it on a laptop and the appliance at boot: errors with their paths, YAML 1.2 core
 * scalars, the files it writes and removes.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_SITE_SCRIPT } from "../../builder/disk/site-partition.js";

let work: string;
let count = 0;
const KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKkcnSlymigXevmPcqcXzI01L2Auy2JeMnxLErfE82tJ root@vm";

async function site(siteYaml: string, manifests: Record<string, string> = {}): Promise<string> {
  const dir = join(work, `site-${++count}`);
  await mkdir(join(dir, "manifests"), { recursive: true });
  await writeFile(join(dir, "site.yaml"), siteYaml);
  for (const [name, text] of Object.entries(manifests)) await writeFile(join(dir, "manifests", name), text);
  return dir;
}

async function py(...args: string[]) {
  const result = await execa("python3", [REPO_SITE_SCRIPT, ...args], { reject: false });
  return { code: result.exitCode, lines: result.stdout.split("\n").filter(Boolean) };
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-site-unit-"));
});
afterAll(() => rm(work, { recursive: true, force: true }));

describe("site.yaml validation", () => {
  it("accepts the template (every setting commented out) and a full site", async () => {
    const template = (await execa("python3", [REPO_SITE_SCRIPT, "template"])).stdout;
    expect((await py("check", await site(template))).code).toBe(0);
    const full = await site(
      `version: 1\nhostname: site-a\nnetwork:\n  dhcp: false\n  interfaces:\n    - name: eno1\n      address: 10.10.0.2/24\n      gateway: 10.10.0.1\n    - macAddress: 52:54:00:12:34:56\n      address: 10.11.0.2/24\n  dns: [10.10.0.1]\n  ntp: [10.10.0.1, ntp.example.org]\nprovisioning:\n  interface: eno2\n  address: 172.22.0.1/24\n  dhcpRange: 172.22.0.10-172.22.0.100\naccess:\n  sshAuthorizedKeys: ["${KEY}"]\n`,
      {
        "hosts.yaml":
          "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {name: node-1, namespace: default}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: node-1-bmc}\n",
        "README.txt": "not a manifest",
      },
    );
    expect(await py("check", full)).toEqual({
      code: 0,
      lines: [
        "valid: site.yaml and 2 objects in 1 file under manifests/",
        "secrets.key: tpm: the key of the cluster's Secrets is sealed to this machine's TPM 2.0 and to PCR 7: the disk alone opens nothing; a machine without a TPM stops before Kubernetes starts; no secrets.recoveryRecipient: a replaced board needs a backup (icn-backup) to get the Secrets back",
      ],
    });
    expect(JSON.parse((await py("objects", full)).lines[0]!)).toEqual([{ file: "manifests/hosts.yaml", kinds: ["BareMetalHost", "Secret"], secret: true }]);
  });

  it("names every error with its path, and reads YAML 1.2 scalars (yes is a string, a MAC address is not a number)", async () => {
    const bad = await site(
      `hostname: Site_A\nextra: 1\nnetwork:\n  dhcp: yes\n  interfaces:\n    - name: eno1\n      address: 10.10.0.0/24\n    - name: eno1\n      address: 10.12.0.2/24\n      gateway: 10.13.0.1\n    - macAddress: 52:54:00:12:34\n      address: 10.14.0.2/24\n  dns: [10.10.0.300]\nprovisioning:\n  interface: eno3\n  address: 172.22.0.1/24\n  dhcpRange: 172.22.0.1-172.22.0.20\naccess:\n  sshAuthorizedKeys: ["ssh-ed25519 not base64!"]\n`,
      { "bad name.yaml": "kind: x\n", "a.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: Bad_Name}\n---\n- a list\n", "notes.doc": "x" },
    );
    const { code, lines } = await py("check", bad);
    expect(code).toBe(3);
    expect(lines).toEqual([
      "extra: unknown key (known here: version, hostname, network, provisioning, access, install, upgrade, secrets)",
      "hostname: expected a host name (lowercase letters, digits and '-', at most 63), got 'Site_A'",
      "network.dhcp: expected true or false, got 'yes'",
      "network.interfaces[0].address: 10.10.0.0 is the network address of 10.10.0.0/24",
      "network.interfaces[1]: eno1 is already configured at network.interfaces[0]",
      "network.interfaces[1].gateway: 10.13.0.1 is not in 10.12.0.0/24, the network of network.interfaces[1].address",
      "network.interfaces[2].macAddress: expected a MAC address (e.g. 52:54:00:12:34:56), got '52:54:00:12:34'",
      "network.dns[0]: expected an IPv4 address, got '10.10.0.300'",
      "provisioning.dhcpRange: contains the appliance's own provisioning address 172.22.0.1",
      "access.sshAuthorizedKeys[0]: expected an OpenSSH public key line (type, base64 key, optional comment), got 'ssh-ed25519 not base64!': the key part is not a ssh-ed25519 key",
      "manifests/a.yaml: document 1: metadata.name: expected a Kubernetes name (lowercase letters, digits, '-' and '.'), got 'Bad_Name'",
      "manifests/a.yaml: document 2: expected a Kubernetes object (a mapping), got a list",
      "manifests/bad name.yaml: file names may hold only letters, digits, '.', '_' and '-'",
      "manifests/notes.doc: not a manifest file (expected .yaml, .yml, .json)",
    ]);
  });

  it("checks how the Secrets' key is kept, says what the choice protects, and writes it for secrets-key", async () => {
    const recipient = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
    const bad = await site("secrets:\n  key: usb\n  tpmPcrs: [7, 24]\n  medium: ICN SECRETS\n  recoveryRecipient: ssh-ed25519 AAAA\n  escrow: true\n");
    expect((await py("check", bad)).lines).toEqual([
      "secrets.escrow: unknown key (known here: key, tpmPcrs, medium, recoveryRecipient)",
      "secrets.key: expected tpm (sealed to this machine's TPM 2.0), medium (encrypted to an identity on a separate medium the site keeps), passphrase (encrypted under a passphrase asked at every boot), disk (in clear beside the data), got 'usb'",
      "secrets.medium: expected a filesystem label (letters, digits, '-' and '_', at most 16; e.g. ICN-SECRETS), got 'ICN SECRETS'",
      "secrets.medium: only with key: medium",
      "secrets.tpmPcrs: expected a list of PCR numbers 0-23 (e.g. [7]), got [7, 24]",
      "secrets.recoveryRecipient: expected an age public key (age1..., as age-keygen prints it), got 'ssh-ed25519 AAAA'",
    ]);
    const medium = await site("secrets:\n  key: medium\n  medium: SITE-A-KEY\n");
    expect((await py("check", medium)).lines[1]).toBe(
      "secrets.key: medium: the key of the cluster's Secrets is encrypted to an identity on the medium labelled SITE-A-KEY: the disk alone opens nothing; every boot waits (10 min) for that medium, the site keeps it apart from the server (and a copy); no secrets.recoveryRecipient: a lost medium needs a backup (icn-backup) to get the Secrets back",
    );
    const mediumRoot = join(work, "secrets-medium-root");
    await py("apply", medium, "--root", mediumRoot);
    expect(await readFile(join(mediumRoot, "etc/icn-bootstrap/site/site.env"), "utf8")).toMatch(
      /^ICN_SECRETS_KEY=medium\nICN_SECRETS_MEDIUM_LABEL=SITE-A-KEY$/m,
    );
    expect((await py("check", await site("secrets:\n  key: passphrase\n"))).lines[1]).toMatch(
      /^secrets\.key: passphrase: .* asked on the console at the first boot and at every boot after: the disk alone opens nothing; no boot \(nor an upgrade's trial boot\) reaches Kubernetes until someone types it; no secrets\.recoveryRecipient: a forgotten passphrase needs a backup/,
    );
    expect((await py("check", await site("secrets:\n  key: disk\n  tpmPcrs: [7]\n"))).lines).toEqual(["secrets.tpmPcrs: only with key: tpm"]);
    expect((await py("check", await site("secrets:\n  tpmPcrs: []\n"))).lines[1]).toMatch(/sealed to this machine's TPM 2\.0 \(to no PCR\): /);
    const disk = await site(`secrets:\n  key: disk\n  recoveryRecipient: ${recipient}\n`);
    expect((await py("check", disk)).lines[1]).toBe(
      `secrets.key: disk: the key of the cluster's Secrets lies in clear on the data partition: a stolen disk or a copy of it opens every Secret; choose tpm on a machine with a TPM 2.0, or medium or passphrase; a copy is encrypted to ${recipient} (the operator's way back)`,
    );
    const root = join(work, "secrets-root");
    await py("apply", await site("secrets:\n  tpmPcrs: [7, 0, 7]\n"), "--root", root);
    const env = await readFile(join(root, "etc/icn-bootstrap/site/site.env"), "utf8");
    expect(env).toMatch(/^ICN_SECRETS_KEY=tpm$/m);
    expect(env).toMatch(/^ICN_SECRETS_TPM_PCRS=0\+7$/m);
    expect(env).not.toMatch(/RECOVERY/);
  });

  it("reads an install-to-disk request, and checks its disk and wipe", async () => {
    expect((await py("install", await site("install:\n  disk: /dev/disk/by-id/nvme-SAMSUNG_1\n"))).lines).toEqual(["/dev/disk/by-id/nvme-SAMSUNG_1 keep"]);
    expect((await py("install", await site("install:\n  disk: SAMSUNG_1\n  wipe: true\n"))).lines).toEqual(["SAMSUNG_1 wipe"]);
    expect((await py("install", await site("version: 1\n"))).lines).toEqual([]);
    expect((await py("check", await site("install:\n  disk: ../sda\n  wipe: yes\n"))).lines).toEqual([
      "install.disk: expected a device path under /dev (e.g. /dev/sda, /dev/disk/by-id/ata-...) or a part of a /dev/disk/by-id name (e.g. Samsung_SSD_870), got '../sda'",
      "install.wipe: expected true or false, got 'yes'",
    ]);
    expect((await py("check", await site("install: {wipe: true}\n"))).lines[0]).toMatch(/^install\.disk: missing/);
  });

  it("takes the public keys an upgrade may be signed by, and refuses a private key naming the fix", async () => {
    const pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n";
    const root = join(work, "root-upgrade");
    const dir = await site(`upgrade:\n  trustedKeys:\n    - |\n${pem.replace(/^/gm, "      ").trimEnd()}\n`);
    expect((await py("check", dir)).code).toBe(0);
    expect((await py("apply", dir, "--root", root)).code).toBe(0);
    expect(await readFile(join(root, "etc/icn-bootstrap/site/upgrade-trusted-keys.pem"), "utf8")).toBe(pem);
    expect((await py("apply", await site("version: 1\n"), "--root", root)).code).toBe(0);
    expect(await readdir(join(root, "etc/icn-bootstrap/site"))).not.toContain("upgrade-trusted-keys.pem");
    const secret = await site('upgrade:\n  trustedKeys: ["-----BEGIN PRIVATE KEY-----\\nMIGH\\n-----END PRIVATE KEY-----\\n"]\n');
    expect((await py("check", secret)).lines).toEqual([
      "upgrade.trustedKeys[0]: this is a private key: give its public half (openssl pkey -in sign.key -pubout), and keep the private key off the site partition",
    ]);
  });

  it("reports YAML syntax errors and duplicate keys with their line", async () => {
    expect((await py("check", await site("network:\n  dhcp: true\n  dhcp: false\n"))).lines[0]).toMatch(/^site\.yaml: line 3, column 3: duplicate key 'dhcp'/);
    expect((await py("check", await site("network: [\n"))).lines[0]).toMatch(/^site\.yaml: line \d+, column \d+: /);
    expect((await py("check", join(work, "nowhere"))).lines[0]).toMatch(/^site\.yaml: missing in .*nowhere \(icn-bootstrap site init makes one\)/);
  });
});

describe("what the appliance writes for a site", () => {
  it("writes networkd, resolved, chrony, sshd and provisioning files, and removes them all for the defaults", async () => {
    const root = join(work, "root");
    const dir = await site(
      `hostname: site-a\nnetwork:\n  dhcp: false\n  interfaces:\n    - macAddress: 52:54:00:AB:CD:EF\n      address: 10.10.0.2/24\n      gateway: 10.10.0.1\n  dns: [10.10.0.1]\n  ntp: [ntp.example.org]\nprovisioning:\n  interface: eno2\n  address: 172.22.0.1/24\n  dhcpRange: 172.22.0.10-172.22.0.100\naccess:\n  sshAuthorizedKeys: ["${KEY}"]\n`,
    );
    expect((await py("apply", dir, "--root", root)).code).toBe(0);
    const read = (path: string) => readFile(join(root, path), "utf8");
    expect(await read("etc/systemd/network/08-icn-site-0.network")).toMatch(
      /\[Match\]\nMACAddress=52:54:00:ab:cd:ef\n\n\[Network\]\nAddress=10\.10\.0\.2\/24\nGateway=10\.10\.0\.1\nDNS=10\.10\.0\.1\n/,
    );
    expect(await read("etc/systemd/network/07-icn-site-provisioning.network")).toMatch(/Name=eno2\n\n\[Network\]\nAddress=172\.22\.0\.1\/24\nDHCP=no\n/);
    expect(await read("etc/systemd/network/19-icn-site-no-dhcp.network")).toMatch(/DHCP=no/);
    expect(await read("etc/chrony/sources.d/icn-site.sources")).toMatch(/^server ntp\.example\.org iburst$/m);
    expect(await read("etc/icn-bootstrap/site/authorized_keys")).toBe(`${KEY}\n`);
    expect(await read("etc/icn-bootstrap/site/site.env")).toMatch(/ICN_PROVISIONING_DHCP_RANGE=172\.22\.0\.10-172\.22\.0\.100/);

    // A smaller site removes what it no longer asks for.
    expect((await py("apply", await site("version: 1\n"), "--root", root)).code).toBe(0);
    expect(await readdir(join(root, "etc/systemd/network"))).toEqual([]);
    expect(await read("etc/icn-bootstrap/site/site.env")).not.toMatch(/PROVISIONING/);
    expect((await py("apply", "--defaults", "--root", root)).code).toBe(0);
    expect(await readdir(join(root, "etc/icn-bootstrap/site"))).toEqual([]);
  });
});
