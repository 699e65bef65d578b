import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir, readFile, rename, rm, stat, utimes, writeFile, readdir } from "node:fs/promises";
import { join } from "node:path";
import { execa, type Options as ExecaOptions } from "execa";
import { cacheRoot, sha256Text } from "./cache.js";
import { parseSize } from "./definition.js";
import { UserError } from "./errors.js";
import { removeOnInterrupt } from "./interrupt.js";
import { endLease, forgetLeases, isSharingFile, leasedByAnotherProcess, leaseStageOutput, lockOutput } from "./cache-sharing.js";
import { formatBytes, formatSeconds, log } from "./log.js";

/** What a stage hands to the stages after it. */
export interface StageResult {
  name: string;
  key: string;
  dir: string;
  reused: boolean;
  seconds: number;
  bytes: number;
}

export interface StageRun {
  /** The stage's output directory (a temporary one, renamed into the cache when the stage succeeds). */
  out: string;
  log(message: string): void;
  /** Runs a host command, its output going to the stage log; fails with the log's tail. */
  exec(file: string, args: string[], options?: ExecaOptions): Promise<string>;
}

export interface Stage<Deps> {
  name: string;
  /** Source files whose content is part of the cache key (usually the stage module itself). */
  sources: string[];
  /** Everything else the output depends on: JSON-serialisable, hashed into the cache key. */
  inputs(deps: Deps): unknown | Promise<unknown>;
  build(run: StageRun, deps: Deps): Promise<void>;
}

const COMPLETE = ".complete.json";
/** Outputs kept per stage: the newest ones by last use (an image is ~1 GiB; the cache must not grow without bound). */
const KEEP_PER_STAGE = 3;
/**
 * What all stage outputs together may occupy before the least recently used ones go
 * (ICN_BOOTSTRAP_STAGE_CACHE_LIMIT): one default build's outputs take about 11 GiB, so
 * this keeps one build and a variant of it (another definition's disk, image and qcow2).
 */
const DEFAULT_CACHE_LIMIT = "20GiB";
/** Outputs this process built or reused: never pruned while its build may still read them. */
const usedByThisBuild = new Set<string>();

/**
 * Runs a stage unless a complete output for the same inputs is already cached.
 * Outputs live in `<stagesDir>/<name>/<key>`; a stage builds into a temporary
 * directory that is renamed there only on success, so a failed or interrupted
 * stage never leaves something that looks complete.
 */
export async function runStage<Deps>(stage: Stage<Deps>, deps: Deps, stagesDir: string): Promise<StageResult> {
  const sourceTexts = await Promise.all(stage.sources.map((file) => readFile(file, "utf8")));
  const inputs = await stage.inputs(deps);
  const key = sha256Text(JSON.stringify({ sources: sourceTexts.map(sha256Text), inputs })).slice(0, 24);
  const dir = join(stagesDir, stage.name, key);

  await mkdir(join(stagesDir, stage.name), { recursive: true });
  await leaseStageOutput(dir); // before looking: another build's pruning then leaves it alone
  let cached = await readComplete(dir);
  // Another build making the same output at this moment: wait for it rather than make it twice.
  const unlock = cached
    ? undefined
    : await lockOutput(
        dir,
        async () => !(cached = await readComplete(dir)),
        (holder) => log(stage.name, `waiting for another build (process ${holder}) that is making this stage's output`),
      );
  if (cached) {
    const now = new Date();
    await utimes(join(dir, COMPLETE), now, now).catch(() => undefined); // marks it recently used for pruning
    usedByThisBuild.add(dir);
    log(stage.name, `reused (inputs unchanged, ${formatBytes(cached.bytes)}, built in ${formatSeconds(cached.seconds * 1000)})`);
    await keepStageCacheUnderLimit(stage.name, stagesDir);
    return { name: stage.name, key, dir, reused: true, seconds: 0, bytes: cached.bytes };
  }
  try {
    return await buildStage(stage, deps, stagesDir, { key, dir, inputs });
  } catch (error) {
    await endLease(dir);
    throw error;
  } finally {
    await unlock?.();
  }
}

async function buildStage<Deps>(
  stage: Stage<Deps>,
  deps: Deps,
  stagesDir: string,
  output: { key: string; dir: string; inputs: unknown },
): Promise<StageResult> {
  const { key, dir, inputs } = output;
  const work = `${dir}.partial-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  const forget = removeOnInterrupt(work);
  const logPath = `${dir}.log`;
  const logStream = createWriteStream(logPath);
  const started = Date.now();
  const heartbeat = setInterval(async () => {
    log(stage.name, `working… ${formatSeconds(Date.now() - started)} elapsed, ${formatBytes(await treeBytes(work).catch(() => 0))} written`);
  }, 30_000);
  log(stage.name, "started");
  try {
    await stage.build(stageRun(stage.name, work, logStream, logPath), deps);
  } catch (error) {
    clearInterval(heartbeat);
    await closeStream(logStream);
    await rm(work, { recursive: true, force: true });
    forget();
    throw error;
  }
  forget();
  clearInterval(heartbeat);
  await closeStream(logStream);
  const seconds = (Date.now() - started) / 1000;
  const bytes = await treeBytes(work);
  await writeFile(join(work, COMPLETE), JSON.stringify({ key, seconds, bytes, inputs }, null, 2));
  // Holding the lock, nothing else writes `dir`: what is there is a killed build's leftover.
  await rm(dir, { recursive: true, force: true });
  await rename(work, dir);
  usedByThisBuild.add(dir);
  log(stage.name, `done in ${formatSeconds(seconds * 1000)}, ${formatBytes(bytes)}`);
  await pruneStage(join(stagesDir, stage.name), KEEP_PER_STAGE);
  await keepStageCacheUnderLimit(stage.name, stagesDir);
  return { name: stage.name, key, dir, reused: false, seconds, bytes };
}

async function keepStageCacheUnderLimit(stageName: string, stagesDir: string): Promise<void> {
  const limit = stageCacheLimit();
  const freed = await pruneStageCache(stagesDir, limit, usedByThisBuild);
  if (freed.length > 0)
    log(
      stageName,
      `stage cache over ${formatBytes(limit)}: removed ${freed.length} least recently used output(s), ${formatBytes(freed.reduce((sum, f) => sum + f.bytes, 0))}`,
    );
}

function stageRun(name: string, out: string, logStream: WriteStream, logPath: string): StageRun {
  return {
    out,
    log: (message) => {
      logStream.write(`# ${message}\n`);
      log(name, message);
    },
    exec: async (file, args, options = {}) => {
      logStream.write(`$ ${file} ${args.join(" ")}\n`);
      const child = execa(file, args, { all: true, reject: false, ...options });
      child.all?.on("data", (chunk: Buffer) => logStream.write(chunk));
      const result = await child;
      if (result.failed) {
        const tail = String(result.all ?? "")
          .trimEnd()
          .split("\n")
          .slice(-15)
          .join("\n    ");
        if (/No space left on device/.test(String(result.all))) {
          throw new UserError(
            `stage ${name}: no space left on device while running '${file}'`,
            `free disk space where the cache lives (${out.replace(/\/[^/]+\/[^/]+$/, "")}) or point ICN_BOOTSTRAP_CACHE at a larger disk; log: ${logPath}`,
          );
        }
        const cause = result.exitCode === undefined ? (result.signal ?? "failed to start") : `exit code ${result.exitCode}`;
        throw new UserError(`stage ${name}: '${file}' failed (${cause}):\n    ${tail}`, `see the full log: ${logPath}`);
      }
      return String(result.stdout ?? "");
    },
  };
}

/** Removes all but the `keep` most recently used complete outputs of a stage (and their logs), sparing those another running build reads. */
export async function pruneStage(stageDir: string, keep: number): Promise<void> {
  const entries = await readdir(stageDir).catch(() => [] as string[]);
  const complete: { name: string; used: number }[] = [];
  for (const name of entries) {
    if (!isOutputName(name)) continue;
    const info = await stat(join(stageDir, name, COMPLETE)).catch(() => undefined);
    if (info) complete.push({ name, used: info.mtimeMs });
  }
  complete.sort((a, b) => b.used - a.used);
  for (const { name } of complete.slice(keep)) await removeOutput(join(stageDir, name));
}

function isOutputName(name: string): boolean {
  return !name.includes(".partial-") && !name.endsWith(".log") && !isSharingFile(name);
}

/** Removes a cached output unless another running build reads it; renamed away first, so no one sees it half-removed. */
async function removeOutput(dir: string): Promise<boolean> {
  if (await leasedByAnotherProcess(dir)) return false;
  const doomed = `${dir}.partial-removed-${process.pid}`;
  try {
    await rename(dir, doomed);
  } catch {
    return false; // another build removed it first
  }
  await rm(doomed, { recursive: true, force: true });
  await rm(`${dir}.log`, { force: true });
  await forgetLeases(dir);
  return true;
}

interface CachedOutput {
  dir: string;
  bytes: number;
  used: number;
}

/**
 * Removes the least recently used complete outputs of every stage until all of them
 * together take at most `limit` bytes; outputs in `keep` (the running build's) and those
 * another running build reads stay, even when they alone are over the limit. Returns what
 * it removed.
 */
export async function pruneStageCache(stagesDir: string, limit: number, keep: ReadonlySet<string>): Promise<CachedOutput[]> {
  const outputs: CachedOutput[] = [];
  for (const stage of await readdir(stagesDir).catch(() => [] as string[])) {
    for (const name of await readdir(join(stagesDir, stage)).catch(() => [] as string[])) {
      if (!isOutputName(name)) continue;
      const dir = join(stagesDir, stage, name);
      const info = await stat(join(dir, COMPLETE)).catch(() => undefined);
      const complete = info && (await readComplete(dir));
      if (info && complete) outputs.push({ dir, bytes: complete.bytes, used: info.mtimeMs });
    }
  }
  let total = outputs.reduce((sum, o) => sum + o.bytes, 0);
  const removed: CachedOutput[] = [];
  for (const output of outputs.filter((o) => !keep.has(o.dir)).sort((a, b) => a.used - b.used)) {
    if (total <= limit) break;
    if (!(await removeOutput(output.dir))) continue;
    total -= output.bytes;
    removed.push(output);
  }
  return removed;
}

/** ICN_BOOTSTRAP_STAGE_CACHE_LIMIT (a size such as '20GiB'), else 20 GiB. */
export function stageCacheLimit(): number {
  const value = process.env.ICN_BOOTSTRAP_STAGE_CACHE_LIMIT || DEFAULT_CACHE_LIMIT;
  if (!/^\d+(\.\d+)?\s*(KiB|MiB|GiB|TiB)$/.test(value)) {
    throw new UserError(`ICN_BOOTSTRAP_STAGE_CACHE_LIMIT is '${value}', not a size`, "set it to a size such as '20GiB' or '500MiB', or unset it for 20 GiB");
  }
  return parseSize(value);
}

async function readComplete(dir: string): Promise<{ seconds: number; bytes: number } | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, COMPLETE), "utf8"));
  } catch {
    return undefined;
  }
}

function closeStream(stream: WriteStream): Promise<void> {
  return new Promise((resolve) => stream.end(resolve));
}

/** Allocated bytes of a directory tree (sparse files count what they really use). */
export async function treeBytes(path: string): Promise<number> {
  const info = await stat(path);
  if (!info.isDirectory()) return info.blocks * 512;
  let total = 0;
  for (const entry of await readdir(path, { withFileTypes: true })) {
    if (entry.isSymbolicLink()) continue;
    total += await treeBytes(join(path, entry.name));
  }
  return total;
}

/** Where stage outputs are cached (ICN_BOOTSTRAP_STAGE_CACHE, else the cache root's stages/). */
export function stagesDir(): string {
  return process.env.ICN_BOOTSTRAP_STAGE_CACHE || join(cacheRoot(), "stages");
}
