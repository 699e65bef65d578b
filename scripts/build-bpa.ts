/**
 * Bundles the BPA operator (bpa/main.ts and its dependencies) into one ESM file,
 * out/bpa/bpa.mjs, that runs with a plain `node` (images/bpa/recipe.yaml copies it),
 * and lists the npm packages the bundle holds in out/bpa/bpa.packages.json (name,
 * version, license of each, from esbuild's record of its inputs) for the image and the SBOM.
 */
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
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
  write: false,
  logLevel: "warning",
  // Some dependencies are CommonJS and call require(); give the ESM bundle one.
  banner: {
    js: ["import { createRequire as __bpaCreateRequire } from 'node:module';", "const require = __bpaCreateRequire(import.meta.url);"].join("\n"),
  },
});
/** Written beside, then renamed: a build running at once (another terminal, the tests) reads either the old file or the new one, never half of one. */
async function writeAtomically(path: string, contents: string | Uint8Array): Promise<void> {
  const temp = `${path}.partial-${process.pid}`;
  await writeFile(temp, contents);
  await rename(temp, path);
}
for (const file of result.outputFiles) await writeAtomically(file.path, file.contents);
const bytes = Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
console.log(`out/bpa/bpa.mjs: ${(bytes / 1024 / 1024).toFixed(1)} MiB`);

/** The package directory of each bundled input under node_modules (the innermost one, for nested installs). */
function packageDirs(inputs: string[]): string[] {
  const dirs = new Set<string>();
  for (const input of inputs) {
    const at = input.lastIndexOf("node_modules/");
    if (at < 0) continue;
    const [first, second] = input.slice(at + "node_modules/".length).split("/");
    dirs.add(input.slice(0, at + "node_modules/".length) + (first!.startsWith("@") ? `${first}/${second}` : first));
  }
  return [...dirs];
}
const packages = await Promise.all(
  packageDirs(Object.keys(result.metafile.inputs)).map(async (dir) => {
    const manifest = JSON.parse(await readFile(resolve(root, dir, "package.json"), "utf8")) as { name: string; version: string; license?: string };
    return { name: manifest.name, version: manifest.version, ...(manifest.license ? { license: manifest.license } : {}) };
  }),
);
packages.sort((a, b) => a.name.localeCompare(b.name) || a.version.localeCompare(b.version));
await writeAtomically(resolve(root, "out/bpa/bpa.packages.json"), `${JSON.stringify({ packages }, null, 2)}\n`);
console.log(`out/bpa/bpa.packages.json: ${packages.length} npm packages`);
