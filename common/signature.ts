/**
 * Offline signatures over the build's outputs, as Sigstore bundles (protobuf-specs
 * `Bundle`, media type v0.3, JSON): a `messageSignature` (the file's SHA-256 and an
 * ECDSA P-256 signature over the file, ASN.1 DER) with `verificationMaterial.publicKey`
 * (a hint naming the key: base64 of the SHA-256 of its DER SubjectPublicKeyInfo, as
 * cosign writes it) and no transparency-log entry. `cosign verify-blob --key PUB.pem
 * --bundle FILE.sigstore.json --insecure-ignore-tlog=true FILE` checks the same file.
 *
 * Shared by the builder (`build` signs, `verify` checks) and, later, the appliance
 * (`upgrade` refuses an image its trusted keys did not sign): node:crypto only.
 * Files are streamed, never held whole (the images are several GiB).
 */
import { createHash, createPublicKey, createSign, createVerify, randomBytes, type KeyObject } from "node:crypto";
import { createReadStream } from "node:fs";
import { readFile, rename, rm, writeFile } from "node:fs/promises";
import { UserError } from "./errors.js";

export const BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json";
/** Media types of the bundle versions that may carry a message signature over a key (v0.1 and v0.2 name the version as a parameter). */
const KNOWN_MEDIA_TYPES = [
  BUNDLE_MEDIA_TYPE,
  "application/vnd.dev.sigstore.bundle+json;version=0.1",
  "application/vnd.dev.sigstore.bundle+json;version=0.2",
  "application/vnd.dev.sigstore.bundle+json;version=0.3",
];
/** Written beside each signed file: `<file>.sigstore.json` (the name cosign's documentation uses). */
export const BUNDLE_SUFFIX = ".sigstore.json";

export const bundlePathFor = (file: string): string => `${file}${BUNDLE_SUFFIX}`;

export interface SigstoreBundle {
  mediaType: string;
  verificationMaterial: {
    publicKey?: { hint?: string };
    certificate?: unknown;
    x509CertificateChain?: unknown;
    tlogEntries?: unknown[];
    timestampVerificationData?: unknown;
  };
  messageSignature?: { messageDigest?: { algorithm?: string; digest?: string }; signature?: string };
  dsseEnvelope?: unknown;
}

/** A public key the verifier trusts, with where it came from (named in verdicts). */
export interface TrustedKey {
  key: KeyObject;
  hint: string;
  source: string;
}

/** What a check of one file's signature found; `reason` says why in words (for `verify`, `upgrade`, logs). */
export interface SignatureVerdict {
  ok: boolean;
  reason: string;
  /** The trusted key that verified the signature, when ok. */
  key?: TrustedKey;
}

/** The key's hint: base64 of the SHA-256 of its DER SubjectPublicKeyInfo (cosign writes the same). */
export function keyHint(publicKey: KeyObject): string {
  return createHash("sha256")
    .update(publicKey.export({ type: "spki", format: "der" }))
    .digest("base64");
}

/** ECDSA over P-256 only: what cosign generates, and what the bundle's SHA2_256 digest pairs with. */
export function assertP256(key: KeyObject, source: string): void {
  const curve = key.asymmetricKeyDetails?.namedCurve;
  if (key.asymmetricKeyType !== "ec" || curve !== "prime256v1")
    throw new UserError(
      `${source} is a ${key.asymmetricKeyType}${curve ? ` ${curve}` : ""} key; icn-bootstrap signs and verifies with ECDSA P-256 keys`,
      "make one with: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sign.key (the public key: openssl pkey -in sign.key -pubout -out sign.pub)",
    );
}

/** Parses a PEM public key (SubjectPublicKeyInfo, "PUBLIC KEY"), as openssl and cosign write them. */
export function parsePublicKey(pem: string | Buffer, source: string): TrustedKey {
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pem, format: "pem" });
  } catch (error) {
    throw new UserError(
      `${source} is not a PEM public key: ${(error as Error).message}`,
      "give the public key (-----BEGIN PUBLIC KEY-----), e.g. from: openssl pkey -in sign.key -pubout -out sign.pub",
    );
  }
  assertP256(key, source);
  return { key, hint: keyHint(key), source };
}

export async function loadPublicKeys(paths: string[]): Promise<TrustedKey[]> {
  const keys: TrustedKey[] = [];
  for (const path of paths) {
    const pem = await readFile(path).catch((error: NodeJS.ErrnoException) => {
      throw new UserError(`cannot read the public key ${path}: ${error.code ?? error.message}`, "give the path of the signing key's public key (PEM)");
    });
    keys.push(parsePublicKey(pem, path));
  }
  return keys;
}

/** One pass over the file: its SHA-256 and whatever else reads the same bytes (a signer, verifiers). */
async function streamFile(path: string, sinks: { update(chunk: Buffer): unknown }[]): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })) {
    hash.update(chunk as Buffer);
    for (const sink of sinks) sink.update(chunk as Buffer);
  }
  return hash.digest("hex");
}

/**
 * Signs a file (streamed, one pass) and returns its bundle. With `expectSha256` (the digest
 * the build computed when it wrote the file), a file that changed since is an error: the
 * signature would vouch for bytes the build did not write.
 */
export async function signFile(path: string, privateKey: KeyObject, opts: { expectSha256?: string } = {}): Promise<SigstoreBundle> {
  const signer = createSign("sha256");
  const sha256 = await streamFile(path, [signer]);
  if (opts.expectSha256 && sha256 !== opts.expectSha256)
    throw new Error(`${path} changed after the build wrote it: sha256 ${sha256}, written as ${opts.expectSha256}; not signing it`);
  const signature = signer.sign({ key: privateKey, dsaEncoding: "der" });
  return {
    mediaType: BUNDLE_MEDIA_TYPE,
    verificationMaterial: { publicKey: { hint: keyHint(createPublicKey(privateKey)) }, tlogEntries: [] },
    messageSignature: {
      messageDigest: { algorithm: "SHA2_256", digest: Buffer.from(sha256, "hex").toString("base64") },
      signature: signature.toString("base64"),
    },
  };
}

/** Signs a file and writes its bundle beside it (`<file>.sigstore.json`), under a temporary name first: never half a signature. */
export async function writeSignature(path: string, privateKey: KeyObject, opts: { expectSha256?: string } = {}): Promise<string> {
  const bundle = await signFile(path, privateKey, opts);
  const target = bundlePathFor(path);
  const temp = `${target}.partial-${process.pid}-${randomBytes(3).toString("hex")}`;
  try {
    await writeFile(temp, `${JSON.stringify(bundle, null, 2)}\n`);
    await rename(temp, target);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  return target;
}

const fail = (reason: string): SignatureVerdict => ({ ok: false, reason });

/** Reads and checks the shape of a bundle; a string is the reason it cannot be used. */
async function readBundle(bundlePath: string): Promise<SigstoreBundle | string> {
  let text: string;
  try {
    text = await readFile(bundlePath, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === "ENOENT"
      ? `not signed: there is no signature ${bundlePath}`
      : `cannot read the signature ${bundlePath}: ${code ?? (error as Error).message}`;
  }
  let bundle: SigstoreBundle;
  try {
    bundle = JSON.parse(text);
  } catch {
    return `${bundlePath} is not JSON: not a Sigstore bundle`;
  }
  if (typeof bundle !== "object" || bundle === null || !KNOWN_MEDIA_TYPES.includes(bundle.mediaType))
    return `${bundlePath} is not a Sigstore bundle (mediaType ${JSON.stringify((bundle as SigstoreBundle | null)?.mediaType)})`;
  if (bundle.dsseEnvelope && !bundle.messageSignature) return `${bundlePath} holds a DSSE attestation, not a signature over the file`;
  const material = bundle.verificationMaterial ?? {};
  if (!material.publicKey && (material.certificate || material.x509CertificateChain))
    return `${bundlePath} was signed with a certificate (keyless signing); only signatures by a trusted key are accepted`;
  const digest = bundle.messageSignature?.messageDigest;
  if (!bundle.messageSignature?.signature || !digest?.digest) return `${bundlePath} has no message signature`;
  if (digest.algorithm !== "SHA2_256") return `${bundlePath} uses digest ${digest.algorithm}; SHA2_256 is supported`;
  return bundle;
}

/**
 * Checks that `file` is signed, as `bundlePath` says, by one of `publicKeys`: the bundle
 * is well formed, the file's SHA-256 is the one signed, and a trusted key's signature
 * verifies over the file's bytes. Never throws for a bad or missing signature: the
 * verdict says why, naming the file (for `verify`'s check lines and `upgrade`'s refusal).
 */
export async function verifySignature(file: string, bundlePath: string, publicKeys: TrustedKey[]): Promise<SignatureVerdict> {
  if (publicKeys.length === 0) return fail(`no trusted public key to check ${file} against`);
  const bundle = await readBundle(bundlePath);
  if (typeof bundle === "string") return fail(bundle);
  const signed = bundle.messageSignature!;
  const signature = Buffer.from(signed.signature!, "base64");
  const hint = bundle.verificationMaterial?.publicKey?.hint;
  const verifiers = publicKeys.map(() => createVerify("sha256"));
  let sha256: string;
  try {
    sha256 = await streamFile(file, verifiers);
  } catch (error) {
    return fail(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  const signedSha256 = Buffer.from(signed.messageDigest!.digest!, "base64").toString("hex");
  if (sha256 !== signedSha256)
    return fail(`${file} is not the file that was signed (tampered or replaced): its sha256 is ${sha256}, the signature ${bundlePath} is over ${signedSha256}`);
  const verified = publicKeys.find((trusted, i) => {
    try {
      return verifiers[i]!.verify({ key: trusted.key, dsaEncoding: "der" }, signature);
    } catch {
      return false; // a signature that is not even DER: verifies with no key
    }
  });
  if (verified) return { ok: true, reason: `${file}: signature ${bundlePath} verified with ${verified.source} (key ${verified.hint})`, key: verified };
  const named = publicKeys.find((k) => k.hint === hint);
  if (named)
    return fail(`${bundlePath}: the signature does not verify with ${named.source}, the key it names: the signature was altered or does not belong to ${file}`);
  return fail(
    `${file} is signed by another key (${hint ? `key ${hint}` : "no key named"}), not by a trusted one (${publicKeys.map((k) => `${k.source}: key ${k.hint}`).join(", ")})`,
  );
}
