/**
 * overlays/usr/lib/icn-bootstrap/backup (icn-backup), the parts that need no booted
 * appliance, with the real `age`: what a backup carries and leaves out, that the file holds
 * nothing in clear and opens only with the operator's identity, that a restore gets every
 * file back as it was, and that a damaged, foreign or mismatched backup is refused naming
 * why. Taking etcd's snapshot and the restore's reboot run on the appliance.
 */
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BACKUP_SCRIPT, withScriptModule } from "../helpers/upgrade-script.js";

const py = (code: string) => withScriptModule(BACKUP_SCRIPT, "b", code);
const SECRET = "cluster-admin-token-3f9a1c77d2";

let work: string;
let identity: string;
let recipient: string;
let otherIdentity: string;
let state: string;

/** The module's STATE table pointed at `state` (the same names, the same left-out folders). */
function stateTable(root: string): string {
  return `[(n, ${JSON.stringify(root)} + p, l) for n, p, l in b.STATE]`;
}

/** Writes a backup of the toy state; returns its path. */
async function makeBackup(name: string): Promise<string> {
  const out = join(work, name);
  const snapshot = join(work, "etcd.db");
  await py(
    [
      `members = b.state_members(${stateTable(state)}, [${JSON.stringify(join(state, "etc/hostname"))}], ${JSON.stringify(join(state, "etc/ssh/ssh_host_*"))})`,
      `m = b.write_backup(${JSON.stringify(out)}, [${JSON.stringify(recipient)}], members, ${JSON.stringify(snapshot)}, {"hostname": "icn-bootstrap-0a1b2c", "kubernetes": "v1.35.4", "etcd": "3.6.16"})`,
      "print(json.dumps(m))",
    ].join("\n"),
  );
  return out;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-backup-"));
  identity = join(work, "operator.key");
  otherIdentity = join(work, "other.key");
  await execa("age-keygen", ["-o", identity]);
  await execa("age-keygen", ["-o", otherIdentity]);
  recipient = (await execa("age-keygen", ["-y", identity])).stdout.trim();
  state = join(work, "appliance");
  const files: Record<string, string> = {
    "etc/kubernetes/pki/ca.key": "the bootstrap cluster's CA key\n",
    "etc/kubernetes/admin.conf": `token: ${SECRET}\n`,
    "var/lib/kubelet/pki/kubelet-client-current.pem": "the kubelet's client certificate\n",
    "var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n",
    "var/lib/kubelet/pods/0f/volumes/x": "a pod's volume: made again\n",
    "var/lib/icn-bootstrap/bpa-api/files/tool.bin": "an upload\n",
    "var/lib/icn-bootstrap/upgrade/etcd-before-upgrade.db": "an upgrade's snapshot: not state\n",
    "etc/icn-bootstrap/pki/registry-push.password": "push-password\n",
    "etc/icn-bootstrap/site/site.env": "ICN_PROVISIONING_INTERFACE=eno2\n",
    "var/lib/icn-data/registry/pushed/docker/registry/v2/blobs/sha256/ab/layer": "a pushed layer\n",
    "etc/hostname": "icn-bootstrap-0a1b2c\n",
    "etc/ssh/ssh_host_ed25519_key": "the host key\n",
  };
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(state, path, ".."), { recursive: true });
    await writeFile(join(state, path), content);
  }
  await chmod(join(state, "etc/kubernetes/pki/ca.key"), 0o600);
  await writeFile(join(work, "etcd.db"), `etcd snapshot bytes with ${SECRET} in a Secret\n`);
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe("icn-backup", () => {
  it("carries the state, the pushed images and the machine's identity, not pods' volumes or an upgrade's snapshots", async () => {
    const names: string[] = JSON.parse(
      await py(
        `print(json.dumps([n for n, p in b.state_members(${stateTable(state)}, [${JSON.stringify(join(state, "etc/hostname"))}], ${JSON.stringify(join(state, "etc/ssh/ssh_host_*"))})]))`,
      ),
    );
    expect(names).toEqual(
      expect.arrayContaining([
        "state/etc/kubernetes/pki/ca.key",
        "state/etc/kubernetes/admin.conf",
        "state/var/lib/kubelet/pki/kubelet-client-current.pem",
        "state/var/lib/icn-bootstrap/bpa-api/files/tool.bin",
        "state/etc/icn-bootstrap/pki/registry-push.password",
        "state/etc/icn-bootstrap/site/site.env",
        "registry/pushed/docker/registry/v2/blobs/sha256/ab/layer",
        `identity${join(state, "etc/hostname")}`,
        `identity${join(state, "etc/ssh/ssh_host_ed25519_key")}`,
      ]),
    );
    expect(names.filter((n) => n.includes("/pods") || n.includes("/upgrade"))).toEqual([]);
  });

  it("carries the Secrets' keys unsealed (the sealed form opens on this machine's TPM only), and refuses when one is not unsealed", async () => {
    const keys = join(work, "secrets-key");
    const unsealed = join(work, "run-secrets");
    await mkdir(keys, { recursive: true });
    await mkdir(unsealed, { recursive: true });
    await writeFile(join(keys, "order"), "key-2\nkey-1\n");
    for (const name of ["key-2", "key-1"]) {
      await writeFile(join(keys, `${name}.cred`), "sealed to this TPM");
      await writeFile(join(unsealed, `${name}.key`), `32 bytes of ${name}`);
    }
    await writeFile(join(keys, "key-2.age"), "the operator's copy");
    await writeFile(join(unsealed, "encryption.yaml"), "the API server's file");
    const members = (code: string) => py(`print(json.dumps(${code}))`);
    const carried: [string, string][] = JSON.parse(await members(`b.secrets_key_members(${JSON.stringify(keys)}, ${JSON.stringify(unsealed)})`));
    const name = "state/var/lib/icn-bootstrap/secrets-key";
    expect(carried).toEqual([
      [name, keys],
      [`${name}/order`, join(keys, "order")],
      [`${name}/key-2.key`, join(unsealed, "key-2.key")],
      [`${name}/key-2.age`, join(keys, "key-2.age")],
      [`${name}/key-1.key`, join(unsealed, "key-1.key")],
    ]);
    const stateNames: string[] = JSON.parse(await members(`[n for n, p in b.state_members(${stateTable(state)}, [], "")]`));
    expect(stateNames.filter((n) => n.includes("secrets-key"))).toEqual([]);
    await rm(join(unsealed, "key-1.key"));
    await expect(members(`b.secrets_key_members(${JSON.stringify(keys)}, ${JSON.stringify(unsealed)})`)).rejects.toThrow(
      /the key key-1 of the cluster's Secrets is not unsealed/,
    );
  });

  it("writes an age file with nothing in clear, which only the operator's identity opens, and gives every file back as it was", async () => {
    const backup = await makeBackup("whole.age");
    const bytes = await readFile(backup);
    expect(bytes.subarray(0, 21).toString()).toBe("age-encryption.org/v1");
    expect(bytes.includes(Buffer.from(SECRET))).toBe(false);
    expect(bytes.includes(Buffer.from("push-password"))).toBe(false);

    const into = join(work, "restored");
    const manifest = JSON.parse(await py(`print(json.dumps(b.read_backup(${JSON.stringify(backup)}, ${JSON.stringify(identity)}, ${JSON.stringify(into)})))`));
    expect(manifest).toMatchObject({ format: "icn-bootstrap-backup/1", hostname: "icn-bootstrap-0a1b2c", kubernetes: "v1.35.4", etcd: "3.6.16" });
    expect(await readFile(join(into, "state/etc/kubernetes/admin.conf"), "utf8")).toBe(`token: ${SECRET}\n`);
    expect(await readFile(join(into, "etcd/snapshot.db"), "utf8")).toContain(SECRET);
    expect(await readFile(join(into, "registry/pushed/docker/registry/v2/blobs/sha256/ab/layer"), "utf8")).toBe("a pushed layer\n");
    expect((await stat(join(into, "state/etc/kubernetes/pki/ca.key"))).mode & 0o777).toBe(0o600);

    const wrongKey = await execa("python3", [BACKUP_SCRIPT, "list", backup, "--identity", otherIdentity], { reject: false });
    expect(wrongKey.exitCode).toBe(1);
    expect(wrongKey.stderr).toMatch(/icn-backup: age could not decrypt .* with .*other\.key: .*no identity matched/);
  });

  it("refuses a backup whose file does not match its manifest, one with a name no backup writes, and one of other versions", async () => {
    // Encrypted with the operator's key, so only the content is wrong.
    const forge = async (name: string, entries: Record<string, string>, manifestFiles: Record<string, string>) => {
      const dir = join(work, `forge-${name}`);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "MANIFEST.json"), JSON.stringify({ format: "icn-bootstrap-backup/1", files: manifestFiles }));
      for (const [path, content] of Object.entries(entries)) {
        await mkdir(join(dir, path, ".."), { recursive: true });
        await writeFile(join(dir, path), content);
      }
      const tar = join(work, `${name}.tar`);
      await execa("tar", ["-cf", tar, "-C", dir, "MANIFEST.json", ...Object.keys(entries).map((p) => p.split("/")[0]!)]);
      await execa("age", ["--encrypt", "--recipient", recipient, "--output", join(work, `${name}.age`), tar]);
      return join(work, `${name}.age`);
    };
    const damaged = await forge("damaged", { "etcd/snapshot.db": "changed" }, { "etcd/snapshot.db": "0".repeat(64) });
    const listed = await execa("python3", [BACKUP_SCRIPT, "list", damaged, "--identity", identity], { reject: false });
    expect(listed.exitCode).toBe(1);
    expect(listed.stderr).toMatch(/etcd\/snapshot\.db in .*damaged\.age does not match its manifest: the backup is damaged/);

    const foreign = await forge("foreign", { "root/.ssh/authorized_keys": "ssh-ed25519 AAAA attacker" }, {});
    const refused = await execa("python3", [BACKUP_SCRIPT, "list", foreign, "--identity", identity], { reject: false });
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toMatch(/holds 'root\/?', which no backup of this appliance writes: not restored/);

    const incomplete = await forge("incomplete", {}, { "etcd/snapshot.db": "0".repeat(64) });
    const short = await execa("python3", [BACKUP_SCRIPT, "list", incomplete, "--identity", identity], { reject: false });
    expect(short.stderr).toMatch(/lacks etcd\/snapshot\.db .* the backup is incomplete/);

    const versions = await py(
      [
        "try:",
        "    b.refuse_other_versions({'kubernetes': 'v1.35.4', 'etcd': '3.6.16'}, ('v1.35.9', '3.6.16'))",
        "except b.Refused as e:",
        "    print(e)",
      ].join("\n"),
    );
    expect(versions).toMatch(
      /made with Kubernetes v1\.35\.4 and etcd 3\.6\.16, this appliance runs Kubernetes v1\.35\.9 .* restore onto an appliance installed from an image of the backup's versions/,
    );
  });

  it("asks for the operator's public key when none is given, and never writes over a file", async () => {
    const none = await execa("python3", [BACKUP_SCRIPT, "create", join(work, "x.age")], { reject: false });
    expect(none.exitCode).toBe(1);
    expect(none.stderr).toMatch(/no recipient: name the operator's age public key \(--recipient age1\.\.\., made with age-keygen/);
    const bad = await execa("python3", [BACKUP_SCRIPT, "create", join(work, "x.age"), "--recipient", "hunter2"], { reject: false });
    expect(bad.stderr).toMatch(/'hunter2' is not an age recipient/);
    const existing = join(work, "kept.age");
    await writeFile(existing, "an earlier backup");
    const over = await execa("python3", [BACKUP_SCRIPT, "create", existing, "--recipient", recipient], { reject: false });
    expect(over.exitCode).toBe(1);
    expect(over.stderr).toMatch(/kept\.age exists: name a new file/);
    expect(await readFile(existing, "utf8")).toBe("an earlier backup");
  });
});
