import { rename, rm, stat } from "node:fs/promises";
import { execa } from "execa";
import { sha256File, tempSibling } from "./cache.js";
import { UserError } from "./errors.js";
import { removeOnInterrupt } from "./interrupt.js";

export interface PublishedImage {
  path: string;
  apparentBytes: number;
  allocatedBytes: number;
  sha256: string;
}

/**
 * Copies finished images out of the stage cache to their final names. All are written
 * under temporary names first and renamed only when every one is complete, so a failure
 * (a full disk, Ctrl-C) leaves nothing under a final name.
 */
export async function publishImages(items: { source: string; target: string }[]): Promise<PublishedImage[]> {
  const temps = items.map(({ target }) => tempSibling(target));
  const forget = temps.map((temp) => removeOnInterrupt(temp));
  try {
    const copies = await Promise.allSettled(items.map(({ source }, i) => copyAndHash(source, temps[i]!)));
    const failed = copies.find((c): c is PromiseRejectedResult => c.status === "rejected");
    if (failed) throw explain(failed.reason, items.map((i) => i.target));
    const published: PublishedImage[] = [];
    for (const [i, { target }] of items.entries()) {
      await rename(temps[i]!, target);
      const info = await stat(target);
      published.push({ path: target, apparentBytes: info.size, allocatedBytes: info.blocks * 512, sha256: (copies[i] as PromiseFulfilledResult<string>).value });
    }
    return published;
  } finally {
    await Promise.all(temps.map((temp) => rm(temp, { force: true })));
    forget.forEach((f) => f());
  }
}

async function copyAndHash(source: string, temp: string): Promise<string> {
  await execa("cp", ["--sparse=always", "--reflink=auto", source, temp]);
  return sha256File(temp);
}

function explain(error: unknown, targets: string[]): unknown {
  const message = String((error as { stderr?: string }).stderr || (error as Error).message);
  if (/No space left/i.test(message)) {
    return new UserError(`no space left to write ${targets.join(" and ")}`, "free space on the output disk or choose another directory with --out; nothing was written under the final names");
  }
  return error;
}
