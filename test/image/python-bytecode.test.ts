/**
 * The container images' Debian roots carry Python bytecode (the image's root is read-only:
 * without it every start compiles again). Bytecode that records a time records the source
 * file's: for what the build copies in from the host (the recipes' Python trees, under
 * /usr/local) that must be the build's fixed time, not when pip wrote the tree on this
 * machine — else the image's digest depends on the machine that built it and a pinned
 * digest fails elsewhere (it did: Ironic's, from setuptools' _distutils_hack, which a .pth
 * imports at Python's start-up).
 */
import { join } from "node:path";
import * as tar from "tar";
import { beforeAll, describe, expect, it } from "vitest";
import type { StagesBuilt } from "../../builder/pipeline.js";
import { BASE_TAR, SOURCE_DATE_EPOCH } from "../../builder/stages/image-debian.js";
import { builtImagesContent } from "../helpers/oci-rootfs.js";

interface Bytecode {
  path: string;
  /** PEP 552 flags: 0 a timestamp .pyc, 3 a checked hash. */
  flags: number;
  /** The source's mtime, for a timestamp .pyc. */
  mtime: number;
}

/** Every .pyc under /usr/local in a root's tar, with its header. */
async function localBytecode(archive: string): Promise<Bytecode[]> {
  const found: Bytecode[] = [];
  await tar.t({
    file: archive,
    onReadEntry: (entry) => {
      if (!/^(\.\/)?usr\/local\/.*\.pyc$/.test(entry.path)) return entry.resume();
      const chunks: Buffer[] = [];
      entry.on("data", (chunk: Buffer) => chunks.push(chunk));
      entry.on("end", () => {
        const header = Buffer.concat(chunks).subarray(0, 16);
        found.push({ path: entry.path, flags: header.readUInt32LE(4), mtime: header.readUInt32LE(8) });
      });
    },
  });
  return found;
}

let content: StagesBuilt;

beforeAll(async () => {
  content = await builtImagesContent();
}, 40 * 60_000);

describe("Python bytecode in the images' own Debian roots", () => {
  it("of the recipes' Python trees records the build's fixed time, never the building machine's", async () => {
    const withTrees = Object.entries(content.imageRoots);
    expect(withTrees.map(([name]) => name)).toContain("ironic");
    for (const [name, root] of withTrees) {
      const bytecode = await localBytecode(join(root.dir, BASE_TAR));
      if (name === "ironic") expect(bytecode.length, "Ironic's tree is compiled").toBeGreaterThan(1000);
      const timestamped = bytecode.filter((b) => b.flags === 0);
      const elsewhen = timestamped.filter((b) => b.mtime !== Number(SOURCE_DATE_EPOCH));
      console.log(`${name}: ${bytecode.length} .pyc under /usr/local, ${timestamped.length} by timestamp, ${elsewhen.length} of another time`);
      expect(
        elsewhen.map((b) => `${b.path} (${new Date(b.mtime * 1000).toISOString()})`),
        `${name}: timestamp .pyc of a time other than SOURCE_DATE_EPOCH`,
      ).toEqual([]);
      expect(bytecode.filter((b) => b.flags !== 0 && b.flags !== 3).map((b) => b.path)).toEqual([]);
    }
  });
});
