import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "bpa/**/*.test.ts"],
    // Image builds and QEMU boots are slow under TCG; each long test sets its own timeout.
    testTimeout: 60_000,
    hookTimeout: 30 * 60_000,
    pool: "forks",
    reporters: ["default"],
  },
});
