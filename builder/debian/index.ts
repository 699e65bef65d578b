/**
 * Reads a suite's package index the way apt does: the signed InRelease (verified with
 * gpgv against a keyring), then the Packages file whose sha256 and size the signed
 * text lists. What comes out is trusted data: name, version, pool path, sha256, size.
 */
import { createHash } from "node:crypto";
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gunzipSync } from "node:zlib";
import { execa } from "execa";
import { UserError } from "../errors.js";
import { DEFAULT_KEYRING, type DebianArchive } from "./schema.js";

export interface IndexEntry {
  name: string;
  version: string;
  architecture: string;
  filename: string;
  sha256: string;
  size: number;
  /** Depends and Pre-Depends, as the index writes them (`a (>= 1), b | c`). */
  depends?: string;
  /** Provides: virtual package names this one satisfies. */
  provides?: string;
}

export interface SuiteIndex {
  archive: DebianArchive;
  suite: string;
  /** The Release file's `Date`. */
  date: string;
  /** name -> every version the suite lists. */
  packages: Map<string, IndexEntry[]>;
}

export interface IndexOptions {
  components: string[];
  architecture: string;
  keyring?: string;
}

/** Every suite of every archive, in preference order. */
export async function readIndexes(archives: DebianArchive[], opts: IndexOptions): Promise<SuiteIndex[]> {
  const jobs = archives.flatMap((archive) => archive.suites.map((suite) => readSuiteIndex(archive, suite, opts)));
  return Promise.all(jobs);
}

export async function readSuiteIndex(archive: DebianArchive, suite: string, opts: IndexOptions): Promise<SuiteIndex> {
  const base = `${archive.url.replace(/\/$/, "")}/dists/${suite}`;
  const inRelease = await fetchBytes(`${base}/InRelease`, `the ${archive.name} archive's index of '${suite}'`);
  const release = await verifySigned(inRelease, opts.keyring ?? DEFAULT_KEYRING, `${base}/InRelease`);
  const fields = parseRelease(release);
  const date = fields.get("Date") ?? "";
  if (!date) throw new UserError(`${base}/InRelease has no Date field`, "point the lock at a Debian archive (its Release files carry a Date)");
  const sums = parseChecksums(fields.get("SHA256") ?? "");
  const byHash = /^yes$/i.test(fields.get("Acquire-By-Hash") ?? "");
  const packages = new Map<string, IndexEntry[]>();
  for (const component of opts.components) {
    const text = await fetchPackagesFile(base, `${component}/binary-${opts.architecture}/Packages`, sums, byHash);
    for (const entry of parsePackages(text)) {
      const list = packages.get(entry.name) ?? [];
      list.push(entry);
      packages.set(entry.name, list);
    }
  }
  return { archive, suite, date, packages };
}

/** The first compressed variant the signed Release lists, fetched (by hash when the archive offers it) and checked. */
async function fetchPackagesFile(base: string, path: string, sums: Map<string, { sha256: string; size: number }>, byHash: boolean): Promise<string> {
  for (const [suffix, decode] of [
    [".gz", (b: Buffer) => gunzipSync(b)],
    [".xz", unxz],
    ["", (b: Buffer) => b],
  ] as const) {
    const sum = sums.get(`${path}${suffix}`);
    if (!sum) continue;
    const dir = path.replace(/\/[^/]+$/, "");
    const url = byHash ? `${base}/${dir}/by-hash/SHA256/${sum.sha256}` : `${base}/${path}${suffix}`;
    const bytes = await fetchBytes(url, `${path}${suffix}`);
    const actual = createHash("sha256").update(bytes).digest("hex");
    if (actual !== sum.sha256 || bytes.length !== sum.size) {
      throw new UserError(
        `${url}: sha256 ${actual} (${bytes.length} bytes) differs from the signed Release (${sum.sha256}, ${sum.size} bytes)`,
        "the mirror is inconsistent or being updated: try again in a few minutes, or use another mirror",
      );
    }
    return (await decode(bytes)).toString("utf8");
  }
  throw new UserError(
    `${base}/InRelease lists no ${path} (.gz, .xz or plain)`,
    "check the suite, component and architecture in the lock file (debian.suite, debian.components, debian.architecture)",
  );
}

async function unxz(bytes: Buffer): Promise<Buffer> {
  const { stdout } = await execa("xz", ["-dc"], { input: bytes, encoding: "buffer" });
  return Buffer.from(stdout);
}

async function fetchBytes(url: string, what: string): Promise<Buffer> {
  let response: Response;
  try {
    response = await fetch(url, { redirect: "follow" });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    throw new UserError(
      `cannot read ${what} at ${url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`,
      "check the network and the archive URL (debian.archives in the lock file, or --mirror / --security-mirror)",
    );
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw new UserError(
      `cannot read ${what}: ${url} answered HTTP ${response.status}`,
      "check that the suite exists on that archive (debian.archives in the lock file, or --mirror / --security-mirror)",
    );
  }
  return Buffer.from(await response.arrayBuffer());
}

/**
 * gpgv checks the clearsigned text against the keyring and writes out only what the signature covers.
 * It runs with a home of its own (nothing of ~/.gnupg takes part) and reads a private copy of
 * the keyring: CI twice saw one of three gpgv runs on the same keyring, at the same moment and
 * under load, fail to read it ("keydb_get_keyblock failed: Invalid keyring"), once even after a
 * retry. With a copy each, runs share no file; a keydb error is still tried twice more, a
 * second apart. A retry cannot let a bad signature through: only a signature that verifies
 * against the keyring ever passes.
 */
async function verifySigned(signed: Buffer, keyring: string, url: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "icn-inrelease-"));
  try {
    await writeFile(join(dir, "InRelease"), signed);
    await copyFile(resolve(keyring), join(dir, "keyring.gpg")).catch((error: NodeJS.ErrnoException) => {
      throw new UserError(
        `cannot read the keyring ${keyring} to check ${url}: ${error.code ?? error.message}`,
        "install debian-archive-keyring (scripts/setup-host.sh does), or name an existing keyring in the lock file (debian.keyring)",
      );
    });
    const gpgv = async () => {
      await rm(join(dir, "Release"), { force: true });
      return execa("gpgv", ["--homedir", dir, "--keyring", join(dir, "keyring.gpg"), "--output", join(dir, "Release"), join(dir, "InRelease")], {
        reject: false,
        all: true,
      });
    };
    let result = await gpgv();
    for (let retry = 0; retry < 2 && result.failed && /keydb_\w+ failed/.test(String(result.all)); retry++) {
      await new Promise((wait) => setTimeout(wait, 1000));
      result = await gpgv();
    }
    if (result.failed) {
      const detail = String(result.all ?? "")
        .trim()
        .split("\n")
        .slice(-3)
        .join("; ");
      throw new UserError(
        `the signature of ${url} does not verify against ${keyring}: ${detail}`,
        "the index is not from the archive you trust: check the mirror; for another archive, name its keyring in the lock file (debian.keyring)",
      );
    }
    return await readFile(join(dir, "Release"), "utf8");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Fields of a deb822 paragraph; a multi-line field's value keeps its continuation lines. */
export function parseRelease(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  let current: string | undefined;
  for (const line of text.split("\n")) {
    if (/^\s/.test(line) && current) fields.set(current, `${fields.get(current)}\n${line.trim()}`);
    else {
      const match = /^([A-Za-z0-9-]+):\s?(.*)$/.exec(line);
      if (match) {
        current = match[1]!;
        fields.set(current, match[2]!);
      }
    }
  }
  return fields;
}

function parseChecksums(block: string): Map<string, { sha256: string; size: number }> {
  const sums = new Map<string, { sha256: string; size: number }>();
  for (const line of block.split("\n")) {
    const [sha256, size, path] = line.trim().split(/\s+/);
    if (sha256 && size && path) sums.set(path, { sha256, size: Number(size) });
  }
  return sums;
}

/** The fields a pin needs, from every paragraph of a Packages file. */
export function parsePackages(text: string): IndexEntry[] {
  const entries: IndexEntry[] = [];
  let entry: Partial<IndexEntry> = {};
  const flush = () => {
    if (entry.name && entry.version && entry.architecture && entry.filename && entry.sha256 && entry.size !== undefined) entries.push(entry as IndexEntry);
    entry = {};
  };
  for (const line of text.split("\n")) {
    if (line === "") {
      flush();
      continue;
    }
    const colon = line.indexOf(": ");
    if (colon <= 0 || line.startsWith(" ")) continue;
    const value = line.slice(colon + 2);
    switch (line.slice(0, colon)) {
      case "Package":
        entry.name = value;
        break;
      case "Version":
        entry.version = value;
        break;
      case "Architecture":
        entry.architecture = value;
        break;
      case "Filename":
        entry.filename = value;
        break;
      case "SHA256":
        entry.sha256 = value;
        break;
      case "Size":
        entry.size = Number(value);
        break;
      case "Depends":
      case "Pre-Depends":
        entry.depends = entry.depends ? `${entry.depends}, ${value}` : value;
        break;
      case "Provides":
        entry.provides = value;
        break;
    }
  }
  flush();
  return entries;
}

/** Debian's version order, by dpkg itself. */
export async function versionGreater(a: string, b: string): Promise<boolean> {
  const result = await execa("dpkg", ["--compare-versions", a, "gt", b], { reject: false });
  return result.exitCode === 0;
}
