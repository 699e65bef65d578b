import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The `image` project runs two files at a time. Started longest first, no long file is
 * left to run alone at the end while the other core idles. Minutes per file from the
 * last full run (docs/testing.md, "Slowest test files"); a file not named here counts as
 * short. Vitest's own order (by its cache of durations) decides the rest, and on a fresh
 * clone it has no durations.
 */
const EXPECTED_MINUTES: Record<string, number> = {
  "test/image/repro.test.ts": 13.6,
  "test/boot/install-boot.test.ts": 11.0,
  "test/boot/boot.test.ts": 6.6,
  "test/boot/compute-node-os.test.ts": 4.7,
  "test/boot/registry-boot.test.ts": 4.7,
  "test/boot/site-boot.test.ts": 4.6,
  "test/boot/virtual-media.test.ts": 2.6,
  "test/boot/network-boot.test.ts": 2.4,
  "test/image/build.test.ts": 1.4,
};

export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const minutes = (file: TestSpecification) => EXPECTED_MINUTES[relative(this.ctx.config.root, file.moduleId)] ?? 0;
    const position = new Map(sorted.map((file, index) => [file, index]));
    // The base order keeps each project's files together; only reorder within a project.
    return [...sorted].sort((a, b) =>
      a.project.name === b.project.name ? minutes(b) - minutes(a) || position.get(a)! - position.get(b)! : position.get(a)! - position.get(b)!,
    );
  }
}
