/**
 * The bundles `build --sign-key` writes are cosign's: the real cosign (pinned in
 * go/cosign, built from the Go module proxy like the image's Go programs) verifies one
 * with the public key and no transparency log, in a network namespace of its own (no
 * network at all, and an empty HOME: no cached Sigstore trust root), and refuses it with
 * another key or for a changed file. And the other way: a bundle cosign writes with the
 * same key is one verifySignature accepts.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { artifactPaths } from "../../builder/sources/index.js";
import { bundlePathFor, loadPublicKeys, verifySignature, writeSignature } from "../../common/signature.js";
import { loadSigningKey } from "../../builder/signing.js";

let work: string;
let cosign: string;

/** cosign offline: its own network namespace (nothing reachable), an empty HOME, the key's password empty. */
function runCosign(args: string[]) {
  return execa("unshare", ["--net", "--", cosign, ...args], {
    cwd: work,
    reject: false,
    all: true,
    env: { HOME: join(work, "home"), COSIGN_PASSWORD: "", PATH: process.env.PATH ?? "/usr/bin:/bin" },
    extendEnv: false,
  });
}

beforeAll(async () => {
  ({ cosign } = await artifactPaths(["cosign"]));
  work = await mkdtemp(join(tmpdir(), "icn-cosign-"));
  for (const name of ["sign", "other"]) {
    await execa("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", `${name}.key`], { cwd: work });
    await execa("openssl", ["pkey", "-in", `${name}.key`, "-pubout", "-out", `${name}.pub`], { cwd: work });
  }
}, 30 * 60_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

async function signedFile(name: string): Promise<string> {
  const path = join(work, name);
  await writeFile(path, randomBytes(3 * 1024 * 1024 + 17));
  const key = await loadSigningKey({ keyPath: join(work, "sign.key"), env: {} });
  await writeSignature(path, key!.privateKey);
  return path;
}

const verifyBlob = (file: string, pub: string) =>
  runCosign(["verify-blob", "--key", pub, "--bundle", bundlePathFor(file), "--insecure-ignore-tlog=true", file]);

describe("cosign and icn-bootstrap's bundles", () => {
  it("cosign verify-blob accepts a bundle icn-bootstrap wrote, offline, with the right key", async () => {
    const file = await signedFile("a.img");
    const result = await verifyBlob(file, "sign.pub");
    console.log(`cosign verify-blob (right key): exit ${result.exitCode}\n${result.all}`);
    expect(result.exitCode).toBe(0);
    expect(result.all).toContain("Verified OK");
  });

  it("cosign verify-blob refuses it with another key, and for a changed file", async () => {
    const file = await signedFile("b.img");
    const wrongKey = await verifyBlob(file, "other.pub");
    console.log(`cosign verify-blob (other key): exit ${wrongKey.exitCode}\n${wrongKey.all}`);
    expect(wrongKey.exitCode).not.toBe(0);
    const bytes = await readFile(file);
    bytes[1000] = bytes[1000]! ^ 0x01;
    await writeFile(file, bytes);
    const tampered = await verifyBlob(file, "sign.pub");
    console.log(`cosign verify-blob (changed file): exit ${tampered.exitCode}\n${tampered.all}`);
    expect(tampered.exitCode).not.toBe(0);
  });

  it("verifySignature accepts the bundle cosign sign-blob writes with the same key (imported into cosign's format)", async () => {
    const imported = await runCosign(["import-key-pair", "--key", "sign.key", "--output-key-prefix", "imported"]);
    expect(imported.exitCode, imported.all).toBe(0);
    const file = join(work, "c.img");
    await writeFile(file, randomBytes(100_000));
    const signed = await runCosign([
      "sign-blob",
      "--yes",
      "--key",
      "imported.key",
      "--bundle",
      bundlePathFor(file),
      "--tlog-upload=false",
      "--use-signing-config=false",
      file,
    ]);
    console.log(`cosign sign-blob: exit ${signed.exitCode}\n${signed.all}`);
    expect(signed.exitCode).toBe(0);
    const verdict = await verifySignature(file, bundlePathFor(file), await loadPublicKeys([join(work, "sign.pub")]));
    expect(verdict.reason).toContain("verified");
    expect(verdict.ok).toBe(true);
    const other = await verifySignature(file, bundlePathFor(file), await loadPublicKeys([join(work, "other.pub")]));
    expect(other.ok).toBe(false);
  });
});
