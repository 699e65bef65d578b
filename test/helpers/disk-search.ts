/**
 * Whether a disk image (raw, or a qcow2 whose clusters are not compressed, as QEMU writes a
 * guest's data) holds given bytes anywhere: read once, in chunks that overlap by the
 * longest needle, so a value that straddles two chunks is still found.
 */
import { createReadStream } from "node:fs";

/** For each needle, whether the file holds it. */
export async function fileHolds(file: string, needles: Buffer[]): Promise<boolean[]> {
  const found = needles.map(() => false);
  const overlap = Math.max(...needles.map((n) => n.length)) - 1;
  let tail = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { highWaterMark: 8 << 20 }) as AsyncIterable<Buffer>) {
    const window = Buffer.concat([tail, chunk]);
    needles.forEach((needle, i) => {
      if (!found[i] && window.includes(needle)) found[i] = true;
    });
    tail = window.subarray(Math.max(0, window.length - overlap));
  }
  return found;
}
