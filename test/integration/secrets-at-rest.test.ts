/**
 * Secrets at rest in the bootstrap cluster's etcd: the appliance's secrets-key script makes
 * the key and the API server's EncryptionConfiguration (as icn-secrets-key.service does at
 * boot), the real kube-apiserver runs with it (the flags kubeadm.yaml gives it), and a
 * Secret's value is searched for in every file etcd wrote. The same search finds the value
 * when the API server has no key, so it can fail. Then `secrets-key rotate` moves every
 * Secret to a new key and drops the old one, while the API server keeps running.
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { artifactPaths } from "../../builder/sources/index.js";
import { startKubeTestServer, type KubeTestServer } from "../helpers/kube-apiserver.js";
import { runSecretsKey, secretsKeyPlace, type SecretsKeyPlace } from "../helpers/secrets-key.js";

let work: string;
let bin: string;
let place: SecretsKeyPlace;
let encrypted: KubeTestServer | undefined;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-secrets-at-rest-"));
  bin = join(work, "bin");
  await mkdir(bin);
  await symlink((await artifactPaths(["kubectl"])).kubectl, join(bin, "kubectl"));
  place = await secretsKeyPlace(join(work, "appliance"), { ICN_SECRETS_KEY: "disk" });
}, 30 * 60_000);

afterAll(async () => {
  await encrypted?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

const kubectl = (server: KubeTestServer, args: string[]) => execa(join(bin, "kubectl"), ["--kubeconfig", server.kubeconfigPath, ...args], { all: true });

/** The files under etcd's data directory that hold `needle`. */
async function filesHolding(dir: string, needle: Buffer): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    if ((await readFile(path)).includes(needle)) found.push(path.slice(dir.length + 1));
  }
  return found;
}

function keyScript(server: KubeTestServer, args: string[]) {
  return runSecretsKey(place, args, { KUBECONFIG: server.kubeconfigPath, ICN_SECRETS_ETCD: server.etcdUrl, PATH: `${bin}:${place.bin}:${process.env.PATH}` });
}

describe("Secrets at rest in etcd", () => {
  it("without the key a Secret's value is in etcd's files; with it, nowhere, and the API server still reads it", { timeout: 10 * 60_000 }, async () => {
    const plain = await startKubeTestServer();
    try {
      const value = `plain-${randomBytes(12).toString("hex")}`;
      await kubectl(plain, ["create", "secret", "generic", "bmc", `--from-literal=password=${value}`]);
      expect(await filesHolding(join(plain.dir, "etcd-data"), Buffer.from(value))).not.toEqual([]);
    } finally {
      await plain.stop();
    }

    const unsealed = await runSecretsKey(place, ["unseal"]);
    expect(unsealed.exitCode, unsealed.all).toBe(0);
    encrypted = await startKubeTestServer({
      apiserverArgs: [`--encryption-provider-config=${place.config}`, "--encryption-provider-config-automatic-reload=true"],
    });
    const value = `sealed-${randomBytes(12).toString("hex")}`;
    await kubectl(encrypted, ["create", "secret", "generic", "bmc", `--from-literal=password=${value}`]);
    const read = await kubectl(encrypted, ["get", "secret", "bmc", "-o", "jsonpath={.data.password}"]);
    expect(Buffer.from(read.stdout, "base64").toString()).toBe(value);
    const data = join(encrypted.dir, "etcd-data");
    expect(await filesHolding(data, Buffer.from(value))).toEqual([]);
    expect(await filesHolding(data, Buffer.from("k8s:enc:secretbox:v1:key-"))).not.toEqual([]);
  });

  it("rotate: every Secret under a new key, the old key gone from the data partition and the API server's file", { timeout: 10 * 60_000 }, async () => {
    expect(encrypted, "the first test started the API server with the key").toBeDefined();
    const server = encrypted!;
    const [oldKey] = (await readFile(join(place.keys, "order"), "utf8")).trim().split("\n");
    for (const name of ["node-ssh", "cluster-kubeconfig"]) await kubectl(server, ["create", "secret", "generic", name, `--from-literal=v=${name}`]);

    const rotated = await keyScript(server, ["rotate"]);
    expect(rotated.exitCode, rotated.all).toBe(0);
    const [newKey, ...others] = (await readFile(join(place.keys, "order"), "utf8")).trim().split("\n");
    expect(others).toEqual([]);
    expect(newKey).not.toBe(oldKey);
    expect(rotated.all).toContain(`rotated to ${newKey}; removed ${oldKey}`);
    expect((await readdir(place.keys)).sort()).toEqual([`${newKey}.key`, "order"]);
    expect(await readFile(place.config, "utf8")).not.toContain(oldKey);

    const status = await keyScript(server, ["status"]);
    expect(status.exitCode, status.all).toBe(0);
    expect(status.stdout).toMatch(new RegExp(`^Secrets in etcd by key:\\n  ${newKey}: \\d+$`, "m"));
    expect(status.stdout).not.toMatch(/identity|key-\S+: \d+\n\s+key-/);
    const read = await kubectl(server, ["get", "secret", "node-ssh", "-o", "jsonpath={.data.v}"]);
    expect(Buffer.from(read.stdout, "base64").toString()).toBe("node-ssh");
  });
});
