import { defineConfig } from "vitest/config";

// One project per test level (see DESIGN.md "Testing, honestly"). Run one with
// `npx vitest run --project unit`; `npm test` runs them all.
export default defineConfig({
  test: {
    // Image builds and QEMU boots are slow under TCG; each long test sets its own timeout.
    testTimeout: 60_000,
    hookTimeout: 30 * 60_000,
    pool: "forks",
    reporters: ["default"],
    projects: [
      { extends: true, test: { name: "unit", include: ["test/unit/**/*.test.ts", "bpa/**/*.test.ts"] } },
      {
        extends: true,
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts"],
          // Starts etcd + kube-apiserver (building them on the first run) and provides "kubeconfigPath".
          globalSetup: ["test/setup/kube.global.ts"],
        },
      },
      { extends: true, test: { name: "image", include: ["test/image/**/*.test.ts"] } },
      { extends: true, test: { name: "boot", include: ["test/boot/**/*.test.ts"] } },
    ],
  },
});
