import { access, mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { execa } from "execa";
import { dirname, join, resolve } from "node:path";
import yaml from "js-yaml";
import { cacheRoot, ContentStore } from "../cache.js";
import { withOutputLock } from "../cache-sharing.js";
import { UserError } from "../errors.js";
import { DEFAULT_LOCK } from "../lockfile.js";
import { log as defaultLog } from "../log.js";
import { ensureGoModBinary, readWrapper, type ArtifactResult, type SourceContext } from "./gomod.js";
import { runGo } from "./go.js";
import { Artifacts, targetsOf, type ArtifactTarget, type GoSrcArtifact, type Profile } from "./schema.js";
import { ensureGoSrcBinary } from "./gosrc.js";
import { ensureUrlFile, type DownloadOptions } from "./url.js";

export type { ArtifactResult } from "./gomod.js";

export interface LoadedArtifacts {
  lockPath: string;
  /** Relative paths in artifact entries are resolved against the lock file's directory. */
  baseDir: string;
  artifacts: Artifacts;
}

/**
 * Reads only the `artifacts` part of a lock file, so fetching artifacts (and the
 * test harness) does not depend on the other sections being resolved yet.
 */
export async function loadArtifacts(lockPath: string = DEFAULT_LOCK): Promise<LoadedArtifacts> {
  let text: string;
  try {
    text = await readFile(lockPath, "utf8");
  } catch {
    throw new UserError(`lock file ${lockPath} is missing`, "run 'icn-bootstrap lock-artifacts' to pin the artifacts");
  }
  let raw: unknown;
  try {
    raw = yaml.load(text, { filename: lockPath });
  } catch (error) {
    throw new UserError(`${lockPath}: not valid YAML: ${(error as Error).message}`, "fix the YAML syntax, or regenerate the file");
  }
  const result = Artifacts.safeParse((raw as { artifacts?: unknown } | null)?.artifacts ?? {});
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new UserError(
      `${lockPath}: artifacts.${issue.path.join(".")}: ${issue.message}`,
      "fix the entry, or regenerate it with 'icn-bootstrap lock-artifacts'",
    );
  }
  checkUniqueBinaries(result.data, lockPath);
  return { lockPath, baseDir: await wrapperBase(lockPath, result.data), artifacts: result.data };
}

/**
 * gomod `dir`s are relative to the lock file; a lock file copied elsewhere (a custom
 * definition beside its own lock) without the go/ wrappers uses the repository's.
 */
async function wrapperBase(lockPath: string, artifacts: Artifacts): Promise<string> {
  const dir = dirname(lockPath);
  const first = Object.values(artifacts).find((a) => a.source === "gomod");
  if (!first || first.source !== "gomod") return dir;
  try {
    await access(join(dir, first.dir, "go.mod"));
    return dir;
  } catch {
    return resolve(import.meta.dirname, "..", "..");
  }
}

function checkUniqueBinaries(artifacts: Artifacts, lockPath: string): void {
  const seen = new Map<string, string>();
  for (const [entryName, entry] of Object.entries(artifacts)) {
    const names = entry.source === "url" ? [entryName] : Object.keys(entry.binaries);
    for (const name of names) {
      const key = `${entry.profile}/${name}`;
      const other = seen.get(key);
      if (other)
        throw new UserError(
          `${lockPath}: artifact '${name}' is provided twice in profile ${entry.profile} (by '${other}' and '${entryName}')`,
          "remove one of the two entries",
        );
      seen.set(key, entryName);
    }
  }
}

/** The binaries to produce; `only` takes binary names or entry names (an entry stands for all its binaries). */
export function selectTargets(loaded: LoadedArtifacts, opts: { only?: string[]; profile?: Profile } = {}): ArtifactTarget[] {
  const all = targetsOf(loaded.artifacts, opts.profile ?? "default");
  if (!opts.only?.length) return all;
  const picked = new Set<ArtifactTarget>();
  for (const wanted of opts.only) {
    const matches = all.filter((t) => t.name === wanted || t.entryName === wanted);
    if (matches.length === 0) {
      throw new UserError(`no artifact named '${wanted}' in ${loaded.lockPath}`, `choose from: ${all.map((t) => t.name).join(", ")}`);
    }
    matches.forEach((m) => picked.add(m));
  }
  return all.filter((t) => picked.has(t));
}

export interface EnsureOptions extends DownloadOptions {
  lockPath?: string;
  only?: string[];
  profile?: Profile;
  store?: ContentStore;
  log?: SourceContext["log"];
  goEnv?: Record<string, string | undefined>;
  heartbeatMs?: number;
}

/**
 * Makes every selected artifact present and verified in the content store: a cache
 * hit re-hashes the stored file; a miss builds (gomod) or downloads (url) it.
 * Builds run one after the other (each go build uses every core already).
 */
export async function ensureArtifacts(opts: EnsureOptions = {}): Promise<ArtifactResult[]> {
  const loaded = await loadArtifacts(opts.lockPath);
  let targets = selectTargets(loaded, opts);
  if (!opts.only?.length) {
    // An entry that cannot be verified (sha256: unknown) is only fetched when asked for by name.
    for (const t of targets.filter((t) => t.source === "url" && t.entry.sha256 === "unknown"))
      (opts.log ?? defaultLog)(t.name, "skipped: sha256 unknown in the lock file (fetch it with --only once it is pinned)");
    targets = targets.filter((t) => !(t.source === "url" && t.entry.sha256 === "unknown"));
  }
  const ctx: SourceContext = {
    baseDir: loaded.baseDir,
    lockPath: loaded.lockPath,
    store: opts.store ?? new ContentStore(),
    log: opts.log ?? defaultLog,
    goEnv: opts.goEnv,
    heartbeatMs: opts.heartbeatMs,
  };
  const results: ArtifactResult[] = [];
  for (const target of targets) {
    // Builds running at once (the test suite's) make each artifact once: the others wait, then find it cached.
    const lock = join(cacheRoot(), "locks", `artifact-${target.entry.profile}-${target.name}`);
    const ensure = () => {
      if (target.source === "gomod") return ensureGoModBinary(target.name, target.entry, target.package, ctx);
      if (target.source === "gosrc") return ensureGoSrcBinary(target.name, target.entryName, target.entry, target.package, ctx, opts);
      return ensureUrlFile(target.name, target.entry, ctx, opts);
    };
    results.push(await withOutputLock(lock, ensure, (holder) => ctx.log(target.name, `waiting for another build (process ${holder}) that is making it`)));
  }
  return results;
}

/** Paths of named binaries (building or downloading what is missing), e.g. for the test harness. */
export async function artifactPaths<N extends string>(names: N[], opts: Omit<EnsureOptions, "only"> = {}): Promise<Record<N, string>> {
  const results = await ensureArtifacts({ ...opts, only: names });
  const paths = {} as Record<N, string>;
  for (const name of names) {
    const result = results.find((r) => r.name === name);
    if (!result) throw new UserError(`artifact '${name}' is not a binary of the lock file`, "name a binary, not an entry");
    paths[name] = result.path;
  }
  return paths;
}

/**
 * A pinned Go source tree: a gomod entry's module (module cache, downloaded through its
 * wrapper so that go.sum verifies it) or a gosrc entry's archive (verified by its sha256,
 * extracted once into the cache).
 */
export async function pinnedModuleDir(entryName: string, what: string, lockPath?: string): Promise<{ dir: string; module: string; version: string }> {
  const loaded = await loadArtifacts(lockPath);
  const entry = loaded.artifacts[entryName];
  if (entry?.source === "gosrc") return { dir: await extractedGoSrc(entryName, entry, loaded), module: entry.url, version: entry.version };
  if (!entry || entry.source !== "gomod")
    throw new UserError(`${what}: '${entryName}' is no gomod or gosrc entry of the lock file`, "use the name of a Go artifact entry (e.g. kubernetes)");
  const wrapper = await readWrapper(entryName, entry, loaded.baseDir);
  const info = JSON.parse(await runGo(["mod", "download", "-json", `${entry.module}@${entry.version}`], { cwd: wrapper.dir, what })) as {
    Dir?: string;
    Error?: string;
  };
  if (!info.Dir) throw new UserError(`${what}: cannot download ${entry.module}@${entry.version}: ${info.Error ?? "no directory"}`, "check the Go module proxy");
  return { dir: info.Dir, module: entry.module, version: entry.version };
}

async function extractedGoSrc(entryName: string, entry: GoSrcArtifact, loaded: LoadedArtifacts): Promise<string> {
  const digest = entry.sha256.replace(/^sha256:/, "");
  const dir = join(cacheRoot(), "gosrc-trees", digest);
  try {
    await access(join(dir, ".complete"));
    return dir;
  } catch {
    // not extracted yet
  }
  const ctx: SourceContext = { baseDir: loaded.baseDir, lockPath: loaded.lockPath, store: new ContentStore(), log: defaultLog };
  const archive = await ensureUrlFile(
    entryName,
    { source: "url", url: entry.url, sha256: entry.sha256, version: entry.version, executable: false, profile: entry.profile },
    ctx,
  );
  await mkdir(dirname(dir), { recursive: true });
  const partial = await mkdtemp(`${dir}.partial-`);
  try {
    await execa("tar", ["-xzf", archive.path, "-C", partial, "--strip-components=1", "--no-same-owner"]);
    await writeFile(join(partial, ".complete"), "");
    await rm(dir, { recursive: true, force: true });
    await rename(partial, dir);
  } catch (error) {
    await rm(partial, { recursive: true, force: true });
    throw new UserError(
      `${entryName}: cannot extract ${entry.url}: ${(error as Error).message}`,
      "the lock file's entry must be a .tar.gz source archive with one top directory",
    );
  }
  return dir;
}
