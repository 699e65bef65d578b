import { open, rename, rm, stat } from "node:fs/promises";
import { createHash } from "node:crypto";
import { tempSibling } from "./cache.js";
import { UserError } from "./errors.js";
import { removeOnInterrupt } from "./interrupt.js";

export interface PublishedImage {
  path: string;
  apparentBytes: number;
  allocatedBytes: number;
  sha256: string;
}

const CHUNK = 4 * 1024 * 1024;

/**
 * Publishing an image has two phases. `stage` copies it next to its final name under a
 * temporary name, hashing it in the same pass; `commit` renames every staged image
 * only when all are complete, so a failure (a full disk, Ctrl-C) never leaves anything
 * under a final name.
 */
export class Publisher {
  private staged: { temp: string; target: string; sha256: Promise<string> }[] = [];
  private forget: (() => void)[] = [];

  /** Starts copying now (so it overlaps other work); the result is awaited in commit(). */
  stage(source: string, target: string): void {
    const temp = tempSibling(target);
    this.forget.push(removeOnInterrupt(temp));
    const sha256 = sparseCopyAndHash(source, temp);
    sha256.catch(() => undefined); // observed in commit()
    this.staged.push({ temp, target, sha256 });
  }

  async commit(): Promise<PublishedImage[]> {
    try {
      const digests = await Promise.allSettled(this.staged.map((s) => s.sha256));
      const failed = digests.find((d): d is PromiseRejectedResult => d.status === "rejected");
      if (failed)
        throw explain(
          failed.reason,
          this.staged.map((s) => s.target),
        );
      const published: PublishedImage[] = [];
      for (const [i, { temp, target }] of this.staged.entries()) {
        await rename(temp, target);
        const info = await stat(target);
        published.push({
          path: target,
          apparentBytes: info.size,
          allocatedBytes: info.blocks * 512,
          sha256: (digests[i] as PromiseFulfilledResult<string>).value,
        });
      }
      return published;
    } finally {
      await this.abandon();
    }
  }

  /** Removes whatever was staged and not committed. */
  async abandon(): Promise<void> {
    await Promise.allSettled(this.staged.map((s) => s.sha256));
    await Promise.all(this.staged.map((s) => rm(s.temp, { force: true })));
    this.forget.forEach((f) => f());
    this.staged = [];
    this.forget = [];
  }
}

/** One read pass: hash every byte, write only the chunks that are not all zeros (a sparse copy). */
async function sparseCopyAndHash(source: string, target: string): Promise<string> {
  const input = await open(source, "r");
  const output = await open(target, "wx");
  try {
    const hash = createHash("sha256");
    const buffer = Buffer.alloc(CHUNK);
    let position = 0;
    for (;;) {
      const { bytesRead } = await input.read(buffer, 0, CHUNK, position);
      if (bytesRead === 0) break;
      const chunk = buffer.subarray(0, bytesRead);
      hash.update(chunk);
      for (const [start, end] of dataRuns(chunk)) await output.write(chunk, start, end - start, position + start);
      position += bytesRead;
    }
    await output.truncate(position);
    await output.sync();
    return hash.digest("hex");
  } finally {
    await input.close();
    await output.close();
  }
}

const BLOCK = 64 * 1024;

/** [start, end) runs of 64 KiB blocks that hold any non-zero byte; zero blocks stay holes. */
function dataRuns(chunk: Buffer): [number, number][] {
  const runs: [number, number][] = [];
  for (let start = 0; start < chunk.length; start += BLOCK) {
    const end = Math.min(start + BLOCK, chunk.length);
    if (isZero(chunk.subarray(start, end))) continue;
    const last = runs.at(-1);
    if (last && last[1] === start) last[1] = end;
    else runs.push([start, end]);
  }
  return runs;
}

function isZero(block: Buffer): boolean {
  const words = new BigUint64Array(block.buffer, block.byteOffset, Math.floor(block.length / 8));
  for (let i = 0; i < words.length; i++) if (words[i] !== 0n) return false;
  for (let i = words.length * 8; i < block.length; i++) if (block[i] !== 0) return false;
  return true;
}

function explain(error: unknown, targets: string[]): unknown {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === "ENOSPC" || /No space left/i.test(String((error as Error).message))) {
    return new UserError(
      `no space left to write ${targets.join(" and ")}`,
      "free space on the output disk or choose another directory with --out; nothing was written under the final names",
    );
  }
  return error;
}
