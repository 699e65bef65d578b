import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";
import LongestFirstSequencer from "./test/setup/longest-first.sequencer.js";

const MORE_THAN_ONE = Math.max(2, availableParallelism() - 1);

// One project per test level (see DESIGN.md "Testing, honestly"). Run one with
// `npx vitest run --project unit`; `npm test` runs them all.
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 30 * 60_000,
    pool: "forks",
    globalSetup: ["test/setup/scratch.global.ts"],
    sequence: { sequencer: LongestFirstSequencer },
    // Beside the console: a file .ci/run summarises at the end (a CI log shows its head and tail).
    reporters: ["default", "json"],
    outputFile: { json: ".test-results/vitest.json" },
    projects: [
      // Two files at a time at least (Vitest's default on 2 cores is one): these files mostly
      // wait on processes they started (the API server, registries, ansible), not the CPU.
      { extends: true, test: { name: "unit", include: ["test/unit/**/*.test.ts", "bpa/**/*.test.ts"], maxWorkers: MORE_THAN_ONE } },
      // A signed Debian archive made by the test on 127.0.0.1: pins as files, cache, pool, snapshot.
      { extends: true, test: { name: "debian", include: ["test/debian/**/*.test.ts"], maxWorkers: MORE_THAN_ONE } },
      {
        extends: true,
        test: {
          name: "integration",
          maxWorkers: MORE_THAN_ONE,
          include: ["test/integration/**/*.test.ts"],
          // Starts ONE etcd + kube-apiserver (building them on the first run) and provides "kubeconfigPath".
          globalSetup: ["test/setup/kube.global.ts"],
        },
      },
      // Image builds and QEMU boots, two files at a time after the other projects: a TCG
      // boot keeps one core busy, builds share the stage cache (builder/cache-sharing.ts).
      {
        extends: true,
        test: { name: "image", include: ["test/image/**/*.test.ts", "test/boot/**/*.test.ts"], maxWorkers: 2, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
