/**
 * The key of the bootstrap cluster's Secrets (overlays/usr/lib/icn-bootstrap/secrets-key):
 * made once, kept on the data partition only sealed to the TPM (systemd-creds with an
 * emulated TPM 2.0, swtpm), encrypted to an identity on a separate medium or under a
 * passphrase asked at boot, or, where the site says so, in clear; unsealed into the API
 * server's EncryptionConfiguration; refused by another TPM or medium; copied for the operator
 * with age.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildSecretsKeyTools, runSecretsKey, secretsKeyPlace, startSwtpm, writeSiteEnv, type Swtpm } from "../helpers/secrets-key.js";

let work: string;
let tpm: Swtpm;
const stopLater: Swtpm[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-secrets-key-"));
  await buildSecretsKeyTools();
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

/** Files under `dir` whose bytes hold `needle`. */
async function filesHolding(dir: string, needle: Buffer): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true }))
    if (entry.isFile() && (await readFile(join(entry.parentPath, entry.name))).includes(needle)) found.push(entry.name);
  return found;
}

/**
 * The site at the console: systemd-ask-password's place (ICN_SECRETS_ASK_PASSWORD) taken by a
 * script that gives the next of `answers` and records each prompt.
 */
async function console_(dir: string, answers: string[]): Promise<{ env: Record<string, string>; prompts: () => Promise<string[]> }> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "answers"), answers.map((a) => `${a}\n`).join(""));
  await writeFile(join(dir, "prompts"), "");
  const script = join(dir, "ask.sh");
  await writeFile(
    script,
    `#!/bin/sh\necho "$*" >> '${dir}/prompts'\n[ -s '${dir}/answers' ] || exit 1\nhead -n 1 '${dir}/answers'\nsed -i 1d '${dir}/answers'\n`,
  );
  return {
    env: { ICN_SECRETS_ASK_PASSWORD: `sh ${script}` },
    prompts: async () => (await readFile(join(dir, "prompts"), "utf8")).split("\n").filter(Boolean),
  };
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

  it(
    "on a separate medium: the data partition holds the key only encrypted to the medium's identity, and opens nothing without that medium",
    { timeout: 180_000 },
    async () => {
      const stick = join(work, "stick");
      await mkdir(stick);
      const place = await secretsKeyPlace(join(work, "medium-mode"), { ICN_SECRETS_KEY: "medium" });
      const made = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_MEDIUM_DIR: stick });
      expect(made.exitCode, made.all).toBe(0);
      expect(made.all).toMatch(/a new identity written to the medium labelled ICN-SECRETS/);
      const [key] = await configuredKeys(place.config);
      const clear = Buffer.from(key!.secret, "base64");
      expect((await readdir(place.keys)).sort()).toEqual([`${key!.name}.wrapped`, "order", "recipient", "wrapped-by"]);
      expect(await filesHolding(place.keys, clear)).toEqual([]);
      const identity = await readFile(join(stick, "icn-secrets-key.identity"), "utf8");
      expect(identity).toMatch(/^AGE-SECRET-KEY-1/m);
      expect(await readdir(place.runtime)).not.toContain("identity");

      // The next boot, with the medium: the same key.
      await rm(place.runtime, { recursive: true });
      const again = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_MEDIUM_DIR: stick });
      expect(again.exitCode, again.all).toBe(0);
      expect(await configuredKeys(place.config)).toEqual([key]);

      // Without it (no filesystem labelled ICN-SECRETS): nothing opens, and it says what to do.
      await rm(place.runtime, { recursive: true });
      const without = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_MEDIUM_WAIT: "0" });
      expect(without.exitCode).toBe(1);
      expect(without.all).toMatch(/no medium labelled ICN-SECRETS after 0 s: .* insert it and restart icn-secrets-key\.service/);
      await expect(stat(place.config)).rejects.toThrow();

      // Another stick with an identity of its own: refused, the keys left as they were.
      const other = join(work, "other-stick");
      await mkdir(other);
      await execa(join(place.bin, "age-keygen"), ["-o", join(other, "icn-secrets-key.identity")]);
      const wrong = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_MEDIUM_DIR: other });
      expect(wrong.exitCode).toBe(1);
      expect(wrong.all).toMatch(/the medium's identity does not open the key key-\S+ \(another medium\?\)/);
      expect(await readdir(place.runtime)).not.toContain("identity");
      expect((await readdir(place.keys)).sort()).toEqual([`${key!.name}.wrapped`, "order", "recipient", "wrapped-by"]);
    },
  );

  it("under a passphrase asked at boot: agreed twice at the first, asked again until it opens, never written anywhere", { timeout: 300_000 }, async () => {
    const passphrase = "correct horse battery staple";
    const place = await secretsKeyPlace(join(work, "passphrase-mode"), { ICN_SECRETS_KEY: "passphrase" });
    const first = await console_(join(work, "console-1"), ["too short", passphrase, "something else entirely", passphrase, passphrase]);
    const made = await runSecretsKey(place, ["unseal"], first.env);
    expect(made.exitCode, made.all).toBe(0);
    expect(made.all).toMatch(/shorter than 12 characters; again/);
    expect(made.all).toMatch(/the two passphrases differ; again/);
    expect(await first.prompts()).toHaveLength(5);
    const [key] = await configuredKeys(place.config);
    expect((await readdir(place.keys)).sort()).toEqual(["identity.age", `${key!.name}.wrapped`, "order", "recipient", "wrapped-by"]);
    expect(await filesHolding(place.keys, Buffer.from(key!.secret, "base64"))).toEqual([]);
    expect(await filesHolding(join(work, "passphrase-mode"), Buffer.from(passphrase))).toEqual([]);

    // The next boot: a wrong passphrase is asked again; the right one opens the same key.
    await rm(place.runtime, { recursive: true });
    const next = await console_(join(work, "console-2"), ["not the passphrase", passphrase]);
    const again = await runSecretsKey(place, ["unseal"], next.env);
    expect(again.exitCode, again.all).toBe(0);
    expect(again.all).toMatch(/the passphrase does not open the key of the cluster's Secrets; again/);
    expect(await next.prompts()).toEqual([
      "Passphrase for the key of the bootstrap cluster's Secrets:",
      "Passphrase for the key of the bootstrap cluster's Secrets:",
    ]);
    expect(await configuredKeys(place.config)).toEqual([key]);

    // Nobody at the console: it stops, nothing written.
    await rm(place.runtime, { recursive: true });
    const nobody = await runSecretsKey(place, ["unseal"], (await console_(join(work, "console-3"), [])).env);
    expect(nobody.exitCode).toBe(1);
    expect(nobody.all).toMatch(/no passphrase was given/);
    await expect(stat(place.config)).rejects.toThrow();

    // The site moves to a medium: opened with the passphrase once, then kept for the medium.
    const stick = join(work, "stick-2");
    await mkdir(stick);
    await writeSiteEnv(place, { ICN_SECRETS_KEY: "medium" });
    const moved = await runSecretsKey(place, ["unseal"], { ...(await console_(join(work, "console-4"), [passphrase])).env, ICN_SECRETS_MEDIUM_DIR: stick });
    expect(moved.exitCode, moved.all).toBe(0);
    expect((await readdir(place.keys)).sort()).toEqual([`${key!.name}.wrapped`, "order", "recipient", "wrapped-by"]);
    expect(await readFile(join(place.keys, "wrapped-by"), "utf8")).toBe("medium\n");
    await rm(place.runtime, { recursive: true });
    const onMedium = await runSecretsKey(place, ["unseal"], { ICN_SECRETS_MEDIUM_DIR: stick });
    expect(onMedium.exitCode, onMedium.all).toBe(0);
    expect(await configuredKeys(place.config)).toEqual([key]);
  });

  it("refuses a site value it does not know, and writes nothing", async () => {
    const place = await secretsKeyPlace(join(work, "bad-mode"), { ICN_SECRETS_KEY: "usb" });
    const result = await runSecretsKey(place, ["unseal"]);
    expect(result.exitCode).toBe(1);
    expect(result.all).toMatch(/secrets\.key is 'usb' in site\.yaml: expected tpm, medium, passphrase or disk/);
    await expect(stat(place.config)).rejects.toThrow();
  });
});
