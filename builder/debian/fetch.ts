/**
 * Brings every pinned .deb into the content-addressed cache, by its record alone:
 * 1. the cache (a second build downloads nothing, and works with the network off);
 * 2. the pool path on the archive that listed it (files stay there a while after the
 *    index moves on), and for a security update also the main archive's pool, where the
 *    next point release puts the same file;
 * 3. a snapshot archive at the recorded index date (keeps every file ever published).
 * Every file is checked against the recorded sha256 before it enters the cache. A
 * package that none of these can give fails the build before any stage runs, naming
 * each place tried and the fix.
 */
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { cacheRoot, ContentStore, tempSibling } from "../cache.js";
import { withOutputLock } from "../cache-sharing.js";
import { UserError } from "../errors.js";
import { formatBytes, formatSeconds, log } from "../log.js";
import { debianSets, type LockFile } from "../lockfile.js";
import type { DebianSources, PinnedPackage } from "./schema.js";

export type DebSource = "cache" | "pool" | "snapshot";

/** What a pinned file is fetched by: the archives, and the snapshot archive at the recorded index dates. */
export type FetchSources = Pick<DebianSources, "archives" | "snapshot" | "indexes">;

export interface DebOrigin {
  name: string;
  version: string;
  sha256: string;
  /** Where this build took it from. */
  from: DebSource;
  /** Where the file was downloaded from (for a cached file: when it entered the cache). */
  url: string;
}

export interface Location {
  source: Exclude<DebSource, "cache">;
  url: string;
}

/** The places a pinned file can be downloaded from, in order. */
export function locationsOf(pin: PinnedPackage, sources: Pick<DebianSources, "archives" | "snapshot" | "indexes">): Location[] {
  const archive = sources.archives.find((a) => a.name === pin.archive);
  const places: Location[] = [];
  if (archive) places.push({ source: "pool", url: `${archive.url.replace(/\/$/, "")}/${pin.filename}` });
  // A point release copies security updates, byte for byte, from the security pool (pool/updates/main/...)
  // into the main archive's pool (pool/main/...), where they outlive their removal from the security archive.
  if (pin.filename.startsWith("pool/updates/")) {
    for (const other of sources.archives.filter((a) => a !== archive))
      places.push({ source: "pool", url: `${other.url.replace(/\/$/, "")}/${pin.filename.replace(/^pool\/updates\//, "pool/")}` });
  }
  const date = pin.date ?? sources.indexes[pin.suite];
  if (sources.snapshot && archive && date)
    places.push({ source: "snapshot", url: `${sources.snapshot.replace(/\/$/, "")}/${archive.snapshotName}/${snapshotTimestamp(date)}/${pin.filename}` });
  return places;
}

/**
 * The snapshot timestamp for an index date: one day later. The snapshot service
 * answers with its newest import at or before the timestamp; an import after the
 * index was published has every file that index lists (files stay in the pool for
 * days after the index drops them).
 */
export function snapshotTimestamp(indexDate: string): string {
  const when = new Date(Date.parse(indexDate) + 24 * 3600_000);
  if (Number.isNaN(when.getTime())) throw new UserError(`not an index date: '${indexDate}'`, "re-make the lock with 'icn-bootstrap lock'");
  return when
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
}

/** Where a downloaded file came from, kept beside it in the cache. */
function originPath(store: ContentStore, sha256: string): string {
  return `${store.pathOf(sha256)}.origin`;
}

export interface EnsureOptions {
  store?: ContentStore;
  /** Parallel downloads. */
  parallel?: number;
  /** Override of the lock's snapshot base URL (build --snapshot). */
  snapshot?: string;
}

/** Makes every pinned file present in the cache (downloading what is missing) or fails naming each one that cannot be had. */
export async function ensureDebs(
  packages: Record<string, PinnedPackage> | [string, PinnedPackage][],
  sources: FetchSources,
  opts: EnsureOptions = {},
): Promise<DebOrigin[]> {
  const store = opts.store ?? new ContentStore();
  const effective = opts.snapshot !== undefined ? { ...sources, snapshot: opts.snapshot } : sources;
  const entries = (Array.isArray(packages) ? packages : Object.entries(packages)).sort(([a], [b]) => a.localeCompare(b));
  const origins: DebOrigin[] = [];
  const failures: { name: string; pin: PinnedPackage; tried: string[] }[] = [];
  const toFetch: [string, PinnedPackage][] = [];
  for (const [name, pin] of entries) {
    if (await store.has(pin.sha256)) {
      const url = await readFile(originPath(store, pin.sha256), "utf8").catch(() => "");
      origins.push({ name, version: pin.version, sha256: pin.sha256, from: "cache", url: url.trim() });
    } else toFetch.push([name, pin]);
  }
  if (toFetch.length > 0) {
    const total = toFetch.reduce((sum, [, pin]) => sum + pin.size, 0);
    log("debian", `fetching ${toFetch.length} of ${entries.length} pinned packages (${formatBytes(total)}) by pool path, snapshot as fallback`);
    const started = Date.now();
    let done = 0;
    let bytes = 0;
    let lastReport = Date.now();
    const queue = [...toFetch];
    const worker = async () => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const [name, pin] = next;
        const tried: string[] = [];
        let got: Location | undefined;
        for (const place of locationsOf(pin, effective)) {
          const problem = await downloadVerified(place.url, pin, store);
          if (!problem) {
            got = place;
            break;
          }
          tried.push(`${place.source} ${place.url}: ${problem}`);
          if (problem.startsWith("sha256")) log("debian", `${name} ${pin.version}: ${place.url}: ${problem}; not used`);
        }
        if (got) {
          await writeFile(originPath(store, pin.sha256), `${got.url}\n`);
          origins.push({ name, version: pin.version, sha256: pin.sha256, from: got.source, url: got.url });
          bytes += pin.size;
        } else failures.push({ name, pin, tried: ["cache: not there", ...tried] });
        done++;
        if (Date.now() - lastReport > 5_000) {
          lastReport = Date.now();
          log("debian", `${done}/${toFetch.length} packages, ${formatBytes(bytes)} of ${formatBytes(total)}, ${formatSeconds(Date.now() - started)}`);
        }
      }
    };
    await Promise.all(Array.from({ length: opts.parallel ?? 6 }, worker));
    if (failures.length === 0) {
      const fromSnapshot = origins.filter((o) => o.from === "snapshot").length;
      log(
        "debian",
        `${toFetch.length} packages fetched (${formatBytes(bytes)}) in ${formatSeconds(Date.now() - started)}, sha256 verified${fromSnapshot ? `; ${fromSnapshot} from the snapshot archive` : ""}`,
      );
    }
  }
  if (failures.length > 0) throw unavailableError(failures);
  // Fetched files finish in any order: the same files must give the same list, fetched or cached.
  return origins.sort((a, b) => a.name.localeCompare(b.name) || a.version.localeCompare(b.version) || a.sha256.localeCompare(b.sha256));
}

function unavailableError(failures: { name: string; pin: PinnedPackage; tried: string[] }[]): UserError {
  failures.sort((a, b) => a.name.localeCompare(b.name));
  const lines = failures.map(({ name, pin, tried }) =>
    [`  ${name} ${pin.version} (${pin.filename}, sha256 ${pin.sha256}):`, ...tried.map((t) => `      ${t}`)].join("\n"),
  );
  const names = failures.map((f) => f.name).join(" ");
  return new UserError(
    `${failures.length} pinned Debian package${failures.length === 1 ? "" : "s"} cannot be had from any place (nothing was built):\n${lines.join("\n")}`,
    `re-pin just ${failures.length === 1 ? "it" : "these"} with 'icn-bootstrap lock --update ${names}' (it shows old -> new), or give a snapshot archive that has the files: 'icn-bootstrap build --snapshot URL' (or debian.snapshot in the lock file)`,
  );
}

/** Downloads one file and puts it in the store if its sha256 is the pinned one; returns what went wrong, or undefined. */
async function downloadVerified(url: string, pin: PinnedPackage, store: ContentStore): Promise<string | undefined> {
  const dir = join(cacheRoot(), "downloads");
  await mkdir(dir, { recursive: true });
  const partial = tempSibling(join(dir, `${pin.sha256}.deb`));
  try {
    let response: Response;
    try {
      response = await fetch(url, { redirect: "follow", signal: AbortSignal.timeout(10 * 60_000) });
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      return `unreachable (${cause?.code ?? cause?.message ?? (error as Error).message})`;
    }
    if (!response.ok || !response.body) {
      await response.body?.cancel();
      return `HTTP ${response.status}`;
    }
    const hash = createHash("sha256");
    let size = 0;
    const hasher = new Transform({
      transform(chunk: Buffer, _enc, done) {
        hash.update(chunk);
        size += chunk.length;
        done(null, chunk);
      },
    });
    try {
      await pipeline(Readable.fromWeb(response.body as import("node:stream/web").ReadableStream), hasher, createWriteStream(partial));
    } catch (error) {
      return `transfer broke off (${(error as Error).message})`;
    }
    const actual = hash.digest("hex");
    if (actual !== pin.sha256) return `sha256 ${actual} (${size} bytes) is not the pinned ${pin.sha256} (${pin.size} bytes): the file's bytes changed`;
    await store.put(partial, { expected: pin.sha256, move: true });
    return undefined;
  } finally {
    await rm(partial, { force: true });
  }
}

/** Every pinned file of the lock (root filesystem and the images' sets), each once. */
export async function ensureLockedDebs(lock: LockFile, opts: EnsureOptions = {}): Promise<DebOrigin[]> {
  const unique = new Map<string, [string, PinnedPackage]>();
  for (const set of debianSets(lock)) for (const [name, pin] of Object.entries(set.packages)) unique.set(pin.sha256, [name, pin]);
  return ensureDebsShared([...unique.values()], lock.debian, opts);
}

/**
 * The files of one pinned set, where a root is made from them: a stage run on its own (the
 * cgo toolchain a Go build needs, a test's single section) may come before any build
 * fetched the lock's files. Nothing is fetched when they are all cached.
 */
export async function ensureSetDebs(packages: Record<string, PinnedPackage>, sources: FetchSources): Promise<void> {
  const store = new ContentStore();
  for (const pin of Object.values(packages)) {
    if (!(await store.has(pin.sha256))) {
      await ensureDebsShared(Object.entries(packages), sources, { store });
      return;
    }
  }
}

/** Builds running at once fetch once: the others wait, then find the packages cached. */
function ensureDebsShared(packages: [string, PinnedPackage][], sources: FetchSources, opts: EnsureOptions): Promise<DebOrigin[]> {
  return withOutputLock(
    join(cacheRoot(), "locks", "debian-packages"),
    () => ensureDebs(packages, sources, opts),
    (holder) => log("debian", `waiting for another build (process ${holder}) that is fetching the pinned packages`),
  );
}
