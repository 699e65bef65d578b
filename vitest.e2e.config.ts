import { defineConfig } from "vitest/config";

// Whole-appliance runs under emulation: longer than CI's budget allows (README "Tests",
// end-to-end). Run with `npm run e2e:appliance` before resolving work that changes the
// booted appliance, and put the figures in the notes.
export default defineConfig({
  test: {
    include: ["test/e2e/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60 * 60_000,
    pool: "forks",
    globalSetup: ["test/setup/scratch.global.ts"],
    fileParallelism: false,
    // Each file is one story (boot, then provision, then install): after a failed step the
    // next would only wait out its own hours-long timeout against a machine that is gone.
    bail: 1,
  },
});
