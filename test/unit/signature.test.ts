/**
 * Signed outputs (common/signature.ts, builder/signing.ts, builder/verify/signatures.ts):
 * keys made at test time with the real openssl, as docs/reproducible-images-sbom-verify.md
 * tells the operator to; small files instead of images (the code streams either).
 */
import { createHash } from "node:crypto";
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BUNDLE_MEDIA_TYPE, bundlePathFor, loadPublicKeys, verifySignature, writeSignature, type TrustedKey } from "../../common/signature.js";
import { UserError } from "../../common/errors.js";
import { assertKeyOutside, loadSigningKey, REPOSITORY, signOutputs, type SigningKey } from "../../builder/signing.js";
import { verifySignatures } from "../../builder/verify/signatures.js";

let work: string;
let signing: SigningKey;
let trusted: TrustedKey[];
let other: TrustedKey[];
const file = () => join(work, "disk.img");

async function openssl(...args: string[]) {
  await execa("openssl", args, { cwd: work });
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-signature-unit-"));
  for (const name of ["sign", "other"]) {
    await openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", `${name}.key`);
    await openssl("pkey", "-in", `${name}.key`, "-pubout", "-out", `${name}.pub`);
  }
  await writeFile(join(work, "passphrase"), "correct horse battery staple\n");
  await openssl("pkcs8", "-topk8", "-in", "sign.key", "-v2", "aes-256-cbc", "-passout", "file:passphrase", "-out", "sign.encrypted.key");
  await openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "rsa.key");
  signing = (await loadSigningKey({ keyPath: join(work, "sign.key"), env: {} }))!;
  trusted = await loadPublicKeys([join(work, "sign.pub")]);
  other = await loadPublicKeys([join(work, "other.pub")]);
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

// Larger than one read (4 MiB), so the stream's chunks are joined as the signature needs.
async function freshFile(): Promise<string> {
  await writeFile(file(), randomBytes(4 * 1024 * 1024 + 12345));
  await rm(bundlePathFor(file()), { force: true });
  return file();
}

async function flipByte(path: string, at: number) {
  const bytes = await readFile(path);
  bytes[at] = bytes[at]! ^ 0x01;
  await writeFile(path, bytes);
}

describe("a file signed and verified", () => {
  it("verifies with the right key, and the bundle is a Sigstore v0.3 bundle over the file's sha256 naming the key as cosign does", async () => {
    const path = await freshFile();
    const bundlePath = await writeSignature(path, signing.privateKey);
    expect(bundlePath).toBe(`${path}.sigstore.json`);
    const verdict = await verifySignature(path, bundlePath, trusted);
    expect(verdict.reason).toContain("verified");
    expect(verdict.ok).toBe(true);

    const bundle = JSON.parse(await readFile(bundlePath, "utf8"));
    expect(bundle.mediaType).toBe(BUNDLE_MEDIA_TYPE);
    expect(bundle.messageSignature.messageDigest).toEqual({
      algorithm: "SHA2_256",
      digest: createHash("sha256")
        .update(await readFile(path))
        .digest("base64"),
    });
    // The hint: base64 of the SHA-256 of the key's DER SubjectPublicKeyInfo, computed here by openssl.
    const der = (await execa("openssl", ["pkey", "-pubin", "-in", join(work, "sign.pub"), "-outform", "DER"], { encoding: "buffer" })).stdout;
    expect(bundle.verificationMaterial.publicKey.hint).toBe(createHash("sha256").update(der).digest("base64"));
    expect(bundle.verificationMaterial.tlogEntries).toEqual([]);
  });

  it("is a plain ECDSA-SHA256 DER signature over the file: openssl verifies it with the public key", async () => {
    const path = await freshFile();
    const bundle = JSON.parse(await readFile(await writeSignature(path, signing.privateKey), "utf8"));
    await writeFile(join(work, "sig.der"), Buffer.from(bundle.messageSignature.signature, "base64"));
    const good = await execa("openssl", ["dgst", "-sha256", "-verify", "sign.pub", "-signature", "sig.der", path], { cwd: work, reject: false });
    expect(good.stdout).toContain("Verified OK");
    const wrong = await execa("openssl", ["dgst", "-sha256", "-verify", "other.pub", "-signature", "sig.der", path], { cwd: work, reject: false });
    expect(wrong.exitCode).not.toBe(0);
  });

  it("fails with another key, saying the file is signed by another key", async () => {
    const path = await freshFile();
    const verdict = await verifySignature(path, await writeSignature(path, signing.privateKey), other);
    expect(verdict.ok).toBe(false);
    expect(verdict.reason).toMatch(/signed by another key \(key \S+\), not by a trusted one \(.*other\.pub: key/);
  });

  it("passes when one of several trusted keys signed it", async () => {
    const path = await freshFile();
    const verdict = await verifySignature(path, await writeSignature(path, signing.privateKey), [...other, ...trusted]);
    expect(verdict.ok).toBe(true);
    expect(verdict.key?.source).toBe(join(work, "sign.pub"));
  });

  it("fails for a file changed after signing (one byte past the first read), naming the file and both digests", async () => {
    const path = await freshFile();
    const bundlePath = await writeSignature(path, signing.privateKey);
    await flipByte(path, 4 * 1024 * 1024 + 7);
    const verdict = await verifySignature(path, bundlePath, trusted);
    expect(verdict.ok).toBe(false);
    expect(verdict.reason).toMatch(new RegExp(`^${path} is not the file that was signed \\(tampered or replaced\\): its sha256 is [0-9a-f]{64}`));
  });

  it("fails when the bundle's digest is rewritten to the tampered file's: the signature does not verify", async () => {
    const path = await freshFile();
    const bundlePath = await writeSignature(path, signing.privateKey);
    await flipByte(path, 10);
    const bundle = JSON.parse(await readFile(bundlePath, "utf8"));
    bundle.messageSignature.messageDigest.digest = createHash("sha256")
      .update(await readFile(path))
      .digest("base64");
    await writeFile(bundlePath, JSON.stringify(bundle));
    const verdict = await verifySignature(path, bundlePath, trusted);
    expect(verdict.ok).toBe(false);
    expect(verdict.reason).toContain("the signature does not verify with");
  });

  it("fails when the signature itself is altered", async () => {
    const path = await freshFile();
    const bundlePath = await writeSignature(path, signing.privateKey);
    const bundle = JSON.parse(await readFile(bundlePath, "utf8"));
    const signature = Buffer.from(bundle.messageSignature.signature, "base64");
    signature[signature.length - 1] = signature[signature.length - 1]! ^ 0x01;
    bundle.messageSignature.signature = signature.toString("base64");
    await writeFile(bundlePath, JSON.stringify(bundle));
    expect((await verifySignature(path, bundlePath, trusted)).ok).toBe(false);
  });

  it("fails for a file with no signature when a key is given, saying it is not signed", async () => {
    const path = await freshFile();
    const verdict = await verifySignature(path, bundlePathFor(path), trusted);
    expect(verdict.ok).toBe(false);
    expect(verdict.reason).toBe(`not signed: there is no signature ${path}.sigstore.json`);
  });

  it("refuses a keyless (certificate) bundle and a file that is not a bundle", async () => {
    const path = await freshFile();
    const bundlePath = await writeSignature(path, signing.privateKey);
    const bundle = JSON.parse(await readFile(bundlePath, "utf8"));
    delete bundle.verificationMaterial.publicKey;
    bundle.verificationMaterial.certificate = { rawBytes: "MIIB" };
    await writeFile(bundlePath, JSON.stringify(bundle));
    expect((await verifySignature(path, bundlePath, trusted)).reason).toContain("keyless");
    await writeFile(bundlePath, JSON.stringify({ mediaType: "application/json" }));
    expect((await verifySignature(path, bundlePath, trusted)).reason).toContain("is not a Sigstore bundle");
  });

  it("fails with no trusted key at all", async () => {
    const path = await freshFile();
    expect((await verifySignature(path, await writeSignature(path, signing.privateKey), [])).ok).toBe(false);
  });
});

describe("the signing key", () => {
  const load = (keyPath: string | undefined, env: Record<string, string> = {}, passphraseFile?: string) =>
    loadSigningKey({ keyPath: keyPath && join(work, keyPath), env, passphraseFile: passphraseFile && join(work, passphraseFile) });
  const userError = async (promise: Promise<unknown>) => {
    const error = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(UserError);
    return error as UserError;
  };

  it("is none when neither --sign-key nor ICN_BOOTSTRAP_SIGN_KEY is given (the build is unsigned)", async () => {
    expect(await load(undefined)).toBeUndefined();
  });

  it("comes from ICN_BOOTSTRAP_SIGN_KEY", async () => {
    const key = await loadSigningKey({ env: { ICN_BOOTSTRAP_SIGN_KEY: join(work, "sign.key") } });
    expect(key?.hint).toBe(trusted[0]!.hint);
  });

  it("that does not exist is a clear error naming the file and how to make a key", async () => {
    const error = await userError(load("missing.key"));
    expect(error.message).toBe(`cannot read the signing key ${join(work, "missing.key")} (--sign-key): no such file`);
    expect(error.hint).toContain("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256");
  });

  it("encrypted: needs its passphrase, from a file or the environment; a wrong one is named", async () => {
    expect((await userError(load("sign.encrypted.key"))).message).toContain("is encrypted and no passphrase was given");
    expect((await load("sign.encrypted.key", {}, "passphrase"))?.hint).toBe(trusted[0]!.hint);
    expect((await load("sign.encrypted.key", { ICN_BOOTSTRAP_SIGN_KEY_PASSPHRASE: "correct horse battery staple" }))?.hint).toBe(trusted[0]!.hint);
    expect((await userError(load("sign.encrypted.key", { ICN_BOOTSTRAP_SIGN_KEY_PASSPHRASE: "wrong" }))).message).toContain("wrong passphrase?");
  });

  it("refuses a public key, an RSA key and a cosign key, each with its fix", async () => {
    expect((await userError(load("sign.pub"))).message).toContain("is a public key");
    expect((await userError(load("rsa.key"))).message).toMatch(/is a rsa key; icn-bootstrap signs and verifies with ECDSA P-256 keys/);
    await writeFile(
      join(work, "cosign.key"),
      "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
    );
    const cosign = await userError(load("cosign.key"));
    expect(cosign.message).toContain("is a cosign key");
    expect(cosign.hint).toContain("cosign import-key-pair --key sign.key");
  });
});

describe("where the signing key may be", () => {
  it("is refused inside the repository (it could be committed) and inside an overlay (it would be in the image)", async () => {
    const overlay = await mkdtemp(join(work, "overlay-"));
    await writeFile(join(overlay, "sign.key"), await readFile(join(work, "sign.key")));
    const inOverlay = (await loadSigningKey({ keyPath: join(overlay, "sign.key"), env: {} }))!;
    await expect(assertKeyOutside(inOverlay, [{ dir: overlay, what: "the overlay site" }])).rejects.toThrow(/inside the overlay site .*copied into the image/);
    const inRepository = { ...signing, source: join(REPOSITORY, "package.json") };
    await expect(assertKeyOutside(inRepository, [{ dir: REPOSITORY, what: "the repository" }])).rejects.toThrow(/inside the repository .*could be committed/);
    await expect(
      assertKeyOutside(signing, [
        { dir: REPOSITORY, what: "the repository" },
        { dir: overlay, what: "the overlay site" },
      ]),
    ).resolves.toBeUndefined();
  });
});

describe("the build's outputs", () => {
  it("each gets a bundle, written whole (no temporary file left); a file changed since the build hashed it is not signed", async () => {
    const dir = await mkdtemp(join(work, "out-"));
    const image = join(dir, "a.img");
    const report = join(dir, "a.report.json");
    await writeFile(image, randomBytes(1000));
    await writeFile(report, "{}");
    const sha256 = createHash("sha256")
      .update(await readFile(image))
      .digest("hex");
    const bundles = await signOutputs([{ path: image, sha256 }, { path: report }], signing);
    expect(bundles).toEqual([`${image}.sigstore.json`, `${report}.sigstore.json`]);
    expect((await readdir(dir)).sort()).toEqual(["a.img", "a.img.sigstore.json", "a.report.json", "a.report.json.sigstore.json"]);
    await expect(signOutputs([{ path: image, sha256: "0".repeat(64) }], signing)).rejects.toThrow(/changed after the build wrote it/);
  });

  it("unsigned, a bundle left by an earlier signed build is removed (it would not match the new file)", async () => {
    const dir = await mkdtemp(join(work, "out-"));
    const image = join(dir, "a.img");
    await writeFile(image, "new");
    await writeFile(`${image}.sigstore.json`, "{}");
    await signOutputs([{ path: image }], undefined);
    expect(await readdir(dir)).toEqual(["a.img"]);
  });
});

describe("verify --key's checks", () => {
  async function signedOut() {
    const dir = await mkdtemp(join(work, "verify-"));
    const paths = { image: join(dir, "x.img"), report: join(dir, "x.report.json"), sbom: join(dir, "x.cdx.json") };
    await writeFile(paths.image, randomBytes(5000));
    await writeFile(paths.report, JSON.stringify({ name: "x", sbomFile: "x.cdx.json" }));
    await writeFile(paths.sbom, JSON.stringify({ bomFormat: "CycloneDX" }));
    await signOutputs([{ path: paths.image }, { path: paths.report }, { path: paths.sbom }], signing);
    return paths;
  }
  const summary = (checks: { name: string; ok: boolean }[]) => checks.map((c) => `${c.name}: ${c.ok ? "ok" : "FAIL"}`);

  it("pass the report, the image and the SBOM signed with the key", async () => {
    const { image, report } = await signedOut();
    expect(summary(await verifySignatures({ image, reportPath: report, keys: trusted }))).toEqual([
      "report signature: ok",
      "image signature: ok",
      "SBOM signature: ok",
    ]);
  });

  it("fail each with another key, and name the file", async () => {
    const { image, report, sbom } = await signedOut();
    const checks = await verifySignatures({ image, reportPath: report, keys: other });
    expect(summary(checks)).toEqual(["report signature: FAIL", "image signature: FAIL", "SBOM signature: FAIL"]);
    expect(checks.map((c) => c.detail.split(" ")[0])).toEqual([report, image, sbom]);
  });

  it("fail the one file tampered with, and a missing signature", async () => {
    const { image, report, sbom } = await signedOut();
    await flipByte(image, 100);
    await rm(`${sbom}.sigstore.json`);
    const checks = await verifySignatures({ image, reportPath: report, keys: trusted });
    expect(summary(checks)).toEqual(["report signature: ok", "image signature: FAIL", "SBOM signature: FAIL"]);
    expect(checks[1]!.detail).toContain("tampered");
    expect(checks[2]!.detail).toContain("not signed");
  });

  it("for a device (no bundle of its own), rest on the report's signature", async () => {
    const { report } = await signedOut();
    expect(summary(await verifySignatures({ reportPath: report, keys: trusted }))).toEqual([
      "report signature: ok",
      "image signature: ok",
      "SBOM signature: ok",
    ]);
    await writeFile(report, JSON.stringify({ name: "x", sbomFile: "x.cdx.json", images: {} }));
    const checks = await verifySignatures({ reportPath: report, keys: trusted });
    expect(summary(checks).slice(0, 2)).toEqual(["report signature: FAIL", "image signature: FAIL"]);
  });

  it("find an image's bundle beside the report when the image was copied on its own", async () => {
    const { image, report } = await signedOut();
    const elsewhere = join(await mkdtemp(join(work, "copy-")), "x.img");
    await writeFile(elsewhere, await readFile(image));
    await chmod(elsewhere, 0o644);
    const checks = await verifySignatures({ image: elsewhere, reportPath: report, keys: trusted });
    expect(checks[1]).toMatchObject({ name: "image signature", ok: true });
  });
});
