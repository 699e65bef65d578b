import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 30 * 60_000,
    pool: "forks",
    projects: [
      { extends: true, test: { name: "unit", include: ["test/unit/**/*.test.ts"] } },
      // Image builds and QEMU boots share the stage cache and both cores: one file at a time.
      { extends: true, test: { name: "image", include: ["test/image/**/*.test.ts", "test/boot/**/*.test.ts"], fileParallelism: false } },
    ],
  },
});
