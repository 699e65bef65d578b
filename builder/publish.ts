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
 * Copies a finished image out of the stage cache to its final name: written under a
 * temporary name first and renamed when complete, so the final name never holds half
 * an image (also after Ctrl-C or a full disk).
 */
export async function publishImage(source: string, target: string): Promise<PublishedImage> {
  const temp = tempSibling(target);
  const forget = removeOnInterrupt(temp);
  try {
    await execa("cp", ["--sparse=always", "--reflink=auto", source, temp]);
    const sha256 = await sha256File(temp);
    await rename(temp, target);
    const info = await stat(target);
    return { path: target, apparentBytes: info.size, allocatedBytes: info.blocks * 512, sha256 };
  } catch (error) {
    await rm(temp, { force: true });
    const message = String((error as { stderr?: string }).stderr || (error as Error).message);
    if (/No space left/i.test(message)) {
      throw new UserError(`no space left to write ${target}`, "free space on the output disk or choose another directory with --out");
    }
    throw error;
  } finally {
    forget();
  }
}
