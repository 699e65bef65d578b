/**
 * The build's side of signing: the operator's private key (a file outside the
 * repository, given with --sign-key or ICN_BOOTSTRAP_SIGN_KEY; its passphrase from a
 * file or an environment variable, never the command line), and the bundles written
 * beside the outputs (common/signature.ts has the format and the check).
 */
import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";
import { readFile, realpath, rm } from "node:fs/promises";
import { relative, resolve, sep } from "node:path";
import { assertP256, bundlePathFor, keyHint, writeSignature } from "../common/signature.js";
import { UserError } from "./errors.js";

export const SIGN_KEY_ENV = "ICN_BOOTSTRAP_SIGN_KEY";
export const PASSPHRASE_ENV = "ICN_BOOTSTRAP_SIGN_KEY_PASSPHRASE";
export const PASSPHRASE_FILE_ENV = "ICN_BOOTSTRAP_SIGN_KEY_PASSPHRASE_FILE";

export const OPENSSL_KEYGEN = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sign.key";

export interface SigningKey {
  privateKey: KeyObject;
  /** The public key's hint (base64 SHA-256 of its DER SubjectPublicKeyInfo), as the bundles name it. */
  hint: string;
  source: string;
}

/** Where the key and its passphrase come from: options first, then the environment. */
export interface SigningKeyOptions {
  keyPath?: string;
  passphraseFile?: string;
  env?: NodeJS.ProcessEnv;
}

async function passphrase(opts: SigningKeyOptions): Promise<string | undefined> {
  const env = opts.env ?? process.env;
  const file = opts.passphraseFile ?? env[PASSPHRASE_FILE_ENV];
  if (file) {
    const text = await readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
      throw new UserError(`cannot read the signing key's passphrase file ${file}: ${error.code ?? error.message}`, "give a file that holds the passphrase");
    });
    return text.replace(/\r?\n$/, "");
  }
  return env[PASSPHRASE_ENV];
}

/**
 * The signing key, or undefined when none is given (the build then writes unsigned
 * outputs). Read before the build starts, so a wrong path or passphrase fails at once.
 */
export async function loadSigningKey(opts: SigningKeyOptions): Promise<SigningKey | undefined> {
  const env = opts.env ?? process.env;
  const path = opts.keyPath ?? (env[SIGN_KEY_ENV] || undefined);
  if (!path) return undefined;
  const from = opts.keyPath ? "--sign-key" : SIGN_KEY_ENV;
  const pem = await readFile(path, "utf8").catch((error: NodeJS.ErrnoException) => {
    throw new UserError(
      `cannot read the signing key ${path} (${from}): ${error.code === "ENOENT" ? "no such file" : (error.code ?? error.message)}`,
      `give the path of an ECDSA P-256 private key in PEM, made e.g. with: ${OPENSSL_KEYGEN}`,
    );
  });
  if (/-----BEGIN ENCRYPTED (SIGSTORE|COSIGN) PRIVATE KEY-----/.test(pem))
    throw new UserError(
      `${path} is a cosign key (scrypt + NaCl secretbox), which icn-bootstrap does not read`,
      `sign with a PKCS#8 PEM key instead: ${OPENSSL_KEYGEN} (cosign can use that same key: cosign import-key-pair --key sign.key)`,
    );
  if (/-----BEGIN PUBLIC KEY-----/.test(pem) && !/PRIVATE KEY-----/.test(pem))
    throw new UserError(`${path} is a public key; signing needs the private key`, "give the private key with --sign-key; the public key is for 'verify --key'");
  if (!/-----BEGIN (ENCRYPTED |EC )?PRIVATE KEY-----/.test(pem))
    throw new UserError(`${path} is not a PEM private key`, `give an ECDSA P-256 private key in PEM, made e.g. with: ${OPENSSL_KEYGEN}`);
  const encrypted = pem.includes("-----BEGIN ENCRYPTED PRIVATE KEY-----");
  const secret = encrypted ? await passphrase(opts) : undefined;
  if (encrypted && secret === undefined)
    throw new UserError(
      `the signing key ${path} is encrypted and no passphrase was given`,
      `put the passphrase in a file and give it with --sign-key-passphrase-file FILE (or ${PASSPHRASE_FILE_ENV}), or set ${PASSPHRASE_ENV}`,
    );
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey({ key: pem, format: "pem", ...(secret !== undefined ? { passphrase: secret } : {}) });
  } catch (error) {
    throw new UserError(
      encrypted
        ? `cannot decrypt the signing key ${path}: wrong passphrase? (${(error as Error).message})`
        : `cannot read the signing key ${path}: ${(error as Error).message}`,
      encrypted
        ? `check the passphrase in --sign-key-passphrase-file, ${PASSPHRASE_FILE_ENV} or ${PASSPHRASE_ENV}`
        : `give an ECDSA P-256 private key in PEM: ${OPENSSL_KEYGEN}`,
    );
  }
  assertP256(privateKey, path);
  return { privateKey, hint: keyHint(createPublicKey(privateKey)), source: path };
}

/** The repository: a key inside it is one `git add` away from being committed. */
export const REPOSITORY = resolve(import.meta.dirname, "..");

/**
 * The private key must stay the operator's: refused inside the repository, or inside a
 * directory whose files go into the image (the definition's overlays).
 */
export async function assertKeyOutside(key: SigningKey, dirs: { dir: string; what: string }[]): Promise<void> {
  const path = await realpath(key.source);
  for (const { dir, what } of dirs) {
    const real = await realpath(dir).catch(() => resolve(dir));
    const rel = relative(real, path);
    if (rel && !rel.startsWith(`..${sep}`) && rel !== ".." && !rel.startsWith(sep))
      throw new UserError(
        `the signing key ${key.source} is inside ${what} (${real}): ${what === "the repository" ? "it could be committed" : "it would be copied into the image"}`,
        "keep the private key outside the repository and the overlays (e.g. in your home directory or on a removable disk), and give its path with --sign-key",
      );
  }
}

/** A file the build wrote, with the sha256 it computed while writing it (checked again as it is signed). */
export interface OutputFile {
  path: string;
  sha256?: string;
}

/**
 * Signs each output (`<file>.sigstore.json` beside it), or, unsigned, removes a bundle
 * an earlier signed build left beside a file of the same name: it no longer matches.
 */
export async function signOutputs(files: OutputFile[], key: SigningKey | undefined): Promise<string[]> {
  const bundles: string[] = [];
  for (const file of files) {
    if (!key) {
      await rm(bundlePathFor(file.path), { force: true });
      continue;
    }
    bundles.push(await writeSignature(file.path, key.privateKey, { expectSha256: file.sha256 }));
  }
  return bundles;
}
