/**
 * A benchmark's figures kept per machine, so that the next run on the same machine says
 * which figure grew: the record is a JSON file under the cache directory (not the
 * repository: figures of one machine mean nothing on another), keyed by what makes a
 * machine comparable (CPU model, cores, the emulation QEMU used).
 */
import { createHash } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { cpus, homedir } from "node:os";
import { dirname, join } from "node:path";

/** A figure that grew by more than this against the last run on the same machine is reported. */
export const GROWTH_LIMIT = 1.5;

export interface BenchRecord {
  machine: string;
  at: string;
  /** figure name -> value (seconds, or % of one CPU): larger is worse for every figure */
  figures: Record<string, number>;
}

export interface Comparison {
  name: string;
  now: number;
  last?: number;
  /** now / last, when both are there and last > 0 */
  growth?: number;
  grewTooMuch: boolean;
}

/** What makes two runs comparable, as text (shown) and as the record's file name. */
export function machineKey(accel: string): { description: string; file: string } {
  const model = cpus()[0]?.model.trim() ?? "unknown CPU";
  const description = `${model}, ${cpus().length} cores, ${accel}`;
  return { description, file: createHash("sha256").update(description).digest("hex").slice(0, 16) };
}

export function recordPath(benchmark: string, machineFile: string): string {
  const cache = process.env.ICN_BOOTSTRAP_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "icn-bootstrap");
  return join(cache, "bench", `${benchmark}-${machineFile}.json`);
}

export async function readRecord(path: string): Promise<BenchRecord | undefined> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as BenchRecord;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new Error(`${path}: not a benchmark record (${(error as Error).message}); remove it to start a new series`);
  }
}

/** Written whole or not at all. */
export async function writeRecord(path: string, record: BenchRecord): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const partial = `${path}.partial`;
  await writeFile(partial, JSON.stringify(record, null, 2) + "\n");
  await rename(partial, path);
}

/** Every figure of `now`, beside the last run's when it has one; small figures (under `floor`) never count as grown. */
export function compareFigures(now: Record<string, number>, last: Record<string, number> | undefined, floor = 5): Comparison[] {
  return Object.entries(now).map(([name, value]) => {
    const before = last?.[name];
    if (before === undefined || before <= 0) return { name, now: value, last: before, grewTooMuch: false };
    const growth = value / before;
    return { name, now: value, last: before, growth, grewTooMuch: growth > GROWTH_LIMIT && value >= floor };
  });
}
