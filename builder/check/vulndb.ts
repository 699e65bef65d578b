/**
 * The Go vulnerability database, pinned: `golang.org/x/vulndb` is a Go module (its
 * data/osv/ holds every report in OSV form), so the lock pins one version of it by the
 * sha256 of its module zip (`advisories.goVulndb`), fetched through the Go module proxy
 * with `go mod download` (verified against the checksum database) into the
 * content-addressed store. `lock --advisories` moves the pin to the newest version.
 */
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { cacheRoot, ContentStore } from "../cache.js";
import { UserError } from "../errors.js";
import { classifyGoFailure, runGoRaw } from "../sources/go.js";
import { readZipEntries } from "./zip.js";

export const VULNDB_MODULE = "golang.org/x/vulndb";

export const GoVulndbPin = z
  .object({
    module: z.literal(VULNDB_MODULE),
    /** An exact version (the proxy may answer only the version list for anything else). */
    version: z.string().regex(/^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/, "a Go module version"),
    /** sha256 of the module zip. */
    sha256: z.string().regex(/^[0-9a-f]{64}$/, "64 lowercase hex digits"),
    /** The version's commit time: how new its reports are. */
    time: z.string().min(1),
  })
  .strict();
export type GoVulndbPin = z.infer<typeof GoVulndbPin>;

/** The lock's `advisories:` section: the vulnerability data `lock --check` reads, pinned. */
export const AdvisoriesLock = z.object({ goVulndb: GoVulndbPin.optional() }).strict();
export type AdvisoriesLock = z.infer<typeof AdvisoriesLock>;

export interface OsvRange {
  introduced?: string;
  fixed?: string;
  last_affected?: string;
}
export interface OsvReport {
  id: string;
  aliases: string[];
  summary: string;
  withdrawn?: string;
  affected: { module: string; ranges: OsvRange[][] }[];
}

export interface GoEnvOptions {
  goEnv?: Record<string, string | undefined>;
}

/** Runs `fn` in a fresh directory outside any module. */
async function outsideModules<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const root = join(cacheRoot(), "tmp");
  await mkdir(root, { recursive: true });
  const work = await mkdtemp(join(root, "vulndb-"));
  try {
    return await fn(work);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** `go mod download -json MODULE@VERSION`: the zip's path and the version's time. */
async function downloadZip(version: string, opts: GoEnvOptions): Promise<{ zip: string; time?: string; version: string }> {
  return outsideModules(async (work) => {
    const command = ["mod", "download", "-json", `${VULNDB_MODULE}@${version}`];
    const result = await runGoRaw(command, { cwd: work, env: opts.goEnv });
    let info: { Zip?: string; Error?: string; Version?: string; Info?: string };
    try {
      info = JSON.parse(result.stdout);
    } catch {
      throw classifyGoFailure(result.all, "the Go vulnerability database", `go ${command.join(" ")}`, result.exitCode);
    }
    if (info.Error || !info.Zip || !info.Version)
      throw classifyGoFailure(info.Error ?? result.all, "the Go vulnerability database", `go ${command.join(" ")}`, result.exitCode);
    return { zip: info.Zip, time: await versionTime(info.Info, info.Version), version: info.Version };
  });
}

/** The version's commit time: its .info file's, else the one a pseudo-version carries. */
async function versionTime(infoFile: string | undefined, version: string): Promise<string | undefined> {
  try {
    if (infoFile) return (JSON.parse(await readFile(infoFile, "utf8")) as { Time?: string }).Time;
  } catch {
    // fall back to the pseudo-version
  }
  const m = /-(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})-[0-9a-f]{12}$/.exec(version);
  return m ? `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}Z` : undefined;
}

/** The newest version the proxy serves, downloaded and stored: the pin to write into the lock. */
export async function newestGoVulndb(store: ContentStore, opts: GoEnvOptions = {}): Promise<GoVulndbPin> {
  const list = await outsideModules((cwd) => runGoRaw(["list", "-m", "-json", `${VULNDB_MODULE}@latest`], { cwd, env: opts.goEnv }));
  let latest: string | undefined;
  try {
    latest = (JSON.parse(list.stdout) as { Version?: string }).Version;
  } catch {
    // reported below
  }
  if (!latest) throw classifyGoFailure(list.all, "the Go vulnerability database", `go list -m -json ${VULNDB_MODULE}@latest`, list.exitCode);
  const got = await downloadZip(latest, opts);
  const sha256 = await store.put(got.zip, { what: `${VULNDB_MODULE}@${got.version}` });
  return { module: VULNDB_MODULE, version: got.version, sha256, time: got.time ?? "unknown" };
}

/**
 * The pinned database's zip from the store; on a miss (and not offline) downloaded and
 * checked against the pin. Undefined when offline and not in this machine's cache.
 */
export async function pinnedGoVulndb(pin: GoVulndbPin, opts: GoEnvOptions & { offline: boolean; store: ContentStore }): Promise<string | undefined> {
  const what = `${VULNDB_MODULE}@${pin.version}`;
  const cached = await opts.store.get(pin.sha256, what);
  if (cached || opts.offline) return cached;
  const got = await downloadZip(pin.version, opts);
  await opts.store.put(got.zip, { expected: pin.sha256, what });
  return opts.store.get(pin.sha256, what);
}

/** Every report of the database's data/osv/ (withdrawn ones left out). */
export async function readGoVulndb(zipPath: string): Promise<OsvReport[]> {
  const files = await readZipEntries(zipPath, /\/data\/osv\/GO-[^/]+\.json$/, zipPath);
  if (files.size === 0)
    throw new UserError(
      `${zipPath}: no data/osv/GO-*.json reports in the Go vulnerability database's zip`,
      "pin another version with 'icn-bootstrap lock --advisories'",
    );
  const reports: OsvReport[] = [];
  for (const [name, bytes] of files) {
    let raw: any;
    try {
      raw = JSON.parse(bytes.toString("utf8"));
    } catch (error) {
      throw new UserError(`${zipPath}: ${name} is not valid JSON: ${(error as Error).message}`, "pin another version with 'icn-bootstrap lock --advisories'");
    }
    if (raw.withdrawn) continue;
    reports.push({
      id: String(raw.id),
      aliases: Array.isArray(raw.aliases) ? raw.aliases.map(String) : [],
      summary: String(raw.summary ?? ""),
      affected: (raw.affected ?? []).map((a: any) => ({
        module: String(a.package?.name ?? ""),
        ranges: (a.ranges ?? []).filter((r: any) => r.type === "SEMVER").map((r: any) => r.events as OsvRange[]),
      })),
    });
  }
  return reports;
}
