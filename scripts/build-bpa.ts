/**
 * Bundles the BPA operator (bpa/main.ts and its dependencies) into one ESM file,
 * out/bpa/bpa.mjs, that runs with a plain `node` (images/bpa/recipe.yaml copies it).
 */
import { mkdir } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { build } from "esbuild";

const root = resolve(import.meta.dirname, "..");
const outfile = resolve(root, "out/bpa/bpa.mjs");
await mkdir(dirname(outfile), { recursive: true });
const result = await build({
  entryPoints: [resolve(root, "bpa/main.ts")],
  outfile,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node18", // Debian bookworm ships nodejs 18.20; trixie 20.x
  sourcemap: false,
  minify: false,
  legalComments: "eof",
  metafile: true,
  logLevel: "warning",
  // Some dependencies are CommonJS and call require(); give the ESM bundle one.
  banner: {
    js: [
      "import { createRequire as __bpaCreateRequire } from 'node:module';",
      "const require = __bpaCreateRequire(import.meta.url);",
    ].join("\n"),
  },
});
const bytes = Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
console.log(`out/bpa/bpa.mjs: ${(bytes / 1024 / 1024).toFixed(1)} MiB`);
