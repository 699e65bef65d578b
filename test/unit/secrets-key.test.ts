/**
 * The key of the bootstrap cluster's Secrets (overlays/usr/lib/icn-bootstrap/secrets-key):
 * made once, kept on the data partition only sealed to the TPM (systemd-creds with an
 * emulated TPM 2.0, swtpm) or, where the site says so, in clear; unsealed into the API
 * server's EncryptionConfiguration; refused by another TPM; copied for the operator with age.
 */
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runSecretsKey, secretsKeyPlace, startSwtpm, writeSiteEnv, type Swtpm } from "../helpers/secrets-key.js";

let work: string;
let tpm: Swtpm;
const stopLater: Swtpm[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-secrets-key-"));
  tpm = await startSwtpm(join(work, "tpm"));
  stopLater.push(tpm);
});
afterAll(async () => {
  await Promise.all(stopLater.map((t) => t.stop()));
  if (work) await rm(work, { recursive: true, force: true });
});

/** The keys the API server's file lists, in its order (the first encrypts). */
async function configuredKeys(config: string): Promise<{ name: string; secret: string }[]> {
  const text = await readFile(config, "utf8");
  expect(text).toMatch(/^kind: EncryptionConfiguration$/m);
  expect(text).toMatch(/- identity: \{\}\n$/);
  return [...text.matchAll(/- name: (\S+)\n\s+secret: (\S+)/g)].map((m) => ({ name: m[1]!, secret: m[2]! }));
}

describe("the key of the cluster's Secrets", () => {
  it("is sealed to the TPM, never kept in clear on the data partition, and unsealed again at the next boot", async () => {
    const place = await secretsKeyPlace(join(work, "tpm-mode"), { ICN_SECRETS_KEY: "tpm" });
    const first = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_TPM2_DEVICE: tpm.device });
    expect(first.exitCode, first.all).toBe(0);
    const [key] = await configuredKeys(place.config);
    expect(Buffer.from(key!.secret, "base64")).toHaveLength(32);
    const kept = (await readdir(place.keys)).sort();
    expect(kept).toEqual([`${key!.name}.cred`, "order"]);
    const sealed = await readFile(join(place.keys, `${key!.name}.cred`));
    expect(sealed.includes(Buffer.from(key!.secret, "base64"))).toBe(false);
    expect((await stat(place.keys)).mode & 0o777).toBe(0o700);
    expect((await stat(place.config)).mode & 0o777).toBe(0o600);

    // The next boot: /run is empty again; the same key comes back from the TPM.
    await rm(place.runtime, { recursive: true });
    await tpm.restart();
    const again = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_TPM2_DEVICE: tpm.device });
    expect(again.exitCode, again.all).toBe(0);
    expect(await configuredKeys(place.config)).toEqual([key]);

    // Another machine's TPM (a replaced board): nothing opens, the error says what to do.
    const other = await startSwtpm(join(work, "other-tpm"));
    stopLater.push(other);
    await rm(place.runtime, { recursive: true });
    const elsewhere = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_TPM2_DEVICE: other.device });
    expect(elsewhere.exitCode).toBe(1);
    expect(elsewhere.all).toMatch(/the TPM did not unseal the key key-\S+ \(another TPM, or PCRs that changed\): restore it with the operator's key/);
    await expect(stat(place.config)).rejects.toThrow();

    // The way back: the key from the operator's backup (icn-backup carries it unsealed) is
    // sealed to the new board's TPM in place of the old seal, and opens there from then on.
    await writeFile(join(place.keys, `${key!.name}.key`), Buffer.from(key!.secret, "base64"));
    await other.restart();
    const restored = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_TPM2_DEVICE: other.device });
    expect(restored.exitCode, restored.all).toBe(0);
    expect((await readdir(place.keys)).sort()).toEqual([`${key!.name}.cred`, "order"]);
    await rm(place.runtime, { recursive: true });
    await other.restart();
    const reboot = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_TPM2_DEVICE: other.device });
    expect(reboot.exitCode, reboot.all).toBe(0);
    expect(await configuredKeys(place.config)).toEqual([key]);
  });

  it("in clear only where the site says so, sealed when the site moves to tpm, and copied to the operator's age key", async () => {
    const identity = join(work, "operator.key");
    await execa("age-keygen", ["-o", identity]);
    const recipient = (await execa("age-keygen", ["-y", identity])).stdout.trim();
    const place = await secretsKeyPlace(join(work, "disk-mode"), { ICN_SECRETS_KEY: "disk", ICN_SECRETS_RECOVERY_RECIPIENT: recipient });
    const made = await runSecretsKey(place, ["unseal"]);
    expect(made.exitCode, made.all).toBe(0);
    const [key] = await configuredKeys(place.config);
    const clear = join(place.keys, `${key!.name}.key`);
    expect((await readFile(clear)).toString("base64")).toBe(key!.secret);
    expect((await stat(clear)).mode & 0o777).toBe(0o600);
    const recovered = await execa("age", ["--decrypt", "--identity", identity, join(place.keys, `${key!.name}.age`)], { encoding: "buffer" });
    expect(Buffer.from(recovered.stdout).toString("base64")).toBe(key!.secret);

    await writeSiteEnv(place, { ICN_SECRETS_KEY: "tpm", ICN_SECRETS_RECOVERY_RECIPIENT: recipient });
    await tpm.restart();
    const sealed = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_TPM2_DEVICE: tpm.device });
    expect(sealed.exitCode, sealed.all).toBe(0);
    expect((await readdir(place.keys)).sort()).toEqual([`${key!.name}.age`, `${key!.name}.cred`, "order"]);
    expect(await configuredKeys(place.config)).toEqual([key]);
  });

  it("refuses a site value it does not know, and writes nothing", async () => {
    const place = await secretsKeyPlace(join(work, "bad-mode"), { ICN_SECRETS_KEY: "passphrase" });
    const result = await runSecretsKey(place, ["unseal"]);
    expect(result.exitCode).toBe(1);
    expect(result.all).toMatch(/secrets\.key is 'passphrase' in site\.yaml: expected tpm or disk/);
    await expect(stat(place.config)).rejects.toThrow();
  });
});
