import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { fileHolds } from "../helpers/disk-search.js";

it("finds bytes anywhere in a file, also across the reader's chunk boundary, and says when they are not there", async () => {
  const dir = await mkdtemp(join(tmpdir(), "icn-disk-search-"));
  try {
    const file = join(dir, "disk.img");
    const disk = Buffer.alloc(20 << 20);
    disk.write("straddling-value", (8 << 20) - 5);
    disk.write("at-the-end", disk.length - 10);
    await writeFile(file, disk);
    expect(await fileHolds(file, [Buffer.from("straddling-value"), Buffer.from("at-the-end"), Buffer.from("not-written")])).toEqual([true, true, false]);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
