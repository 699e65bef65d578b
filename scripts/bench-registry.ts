/**
 * Figures for the registry stage (npm run bench:registry):
 * - registry size against the sum of the unique layer sizes (target: at most 1.02x);
 * - seeding throughput (skopeo through docker-registry) against a plain `cp` of the same
 *   bytes (the unique blobs of the OCI layout), measured in the same run;
 * - peak memory of the seeding: the largest skopeo process, the registry, the builder.
 * Uses the cached images stage; the registry stage is re-run in a scratch stage directory.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { loadDefinition } from "../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../builder/lockfile.js";
import { setQuiet } from "../builder/log.js";
import { stagesDir, runStages } from "../builder/pipeline.js";
import { runStage } from "../builder/stage.js";
import { OCI_DIR } from "../builder/stages/images.js";
import { registryStage, SEEDED_JSON, type SeedStats } from "../builder/stages/registry.js";

const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;

async function main() {
  const definition = await loadDefinition();
  const lock = await loadLock(DEFAULT_LOCK);
  setQuiet(true);
  const content = await runStages({ definition, lock, lockPath: DEFAULT_LOCK, stagesDir: stagesDir(), sections: ["content"], stopAfterImages: true });
  setQuiet(false);
  const blobs = join(content.images!.dir, OCI_DIR, "blobs", "sha256");
  let bytes = 0;
  for (const name of await readdir(blobs)) bytes += (await stat(join(blobs, name))).size;

  const scratch = await mkdtemp(join(tmpdir(), "icn-bench-registry-"));
  try {
    // A plain copy of the same bytes, cold-ish (after a sync), on the same disk as the cache.
    const copyTarget = join(scratch, "cp");
    await mkdir(copyTarget);
    await execa("sync");
    const cpStart = process.hrtime.bigint();
    await execa("cp", ["-r", "--reflink=never", blobs, copyTarget]);
    await execa("sync");
    const cpSeconds = Number(process.hrtime.bigint() - cpStart) / 1e9;

    const registry = await runStage(registryStage, { images: content.images }, join(scratch, "stages"));
    const { stats } = JSON.parse(await readFile(join(registry.dir, SEEDED_JSON), "utf8")) as { stats: SeedStats };
    const rows: [string, string][] = [
      ["images", String(stats.images)],
      ["unique blobs in the OCI layout (bytes pushed)", mib(bytes)],
      ["sum of unique layer sizes", mib(stats.uniqueLayerBytes)],
      ["registry storage (apparent size of every file)", mib(stats.storageBytes)],
      ["registry size / unique layers", `${(stats.storageBytes / stats.uniqueLayerBytes).toFixed(4)}x (target <= 1.02x)`],
      ["seeding (skopeo -> docker-registry), pushes only", `${stats.seedSeconds.toFixed(1)} s, ${(bytes / 1024 / 1024 / stats.seedSeconds).toFixed(0)} MiB/s`],
      ["plain cp of the same bytes", `${cpSeconds.toFixed(1)} s, ${(bytes / 1024 / 1024 / cpSeconds).toFixed(0)} MiB/s`],
      ["seeding / cp throughput", `${(cpSeconds / stats.seedSeconds).toFixed(2)}`],
      ["verification (pull every image back by digest)", `${stats.verifySeconds.toFixed(1)} s`],
      ["whole registry stage", `${registry.seconds.toFixed(1)} s`],
      ["peak RSS: largest skopeo process", mib(stats.skopeoMaxRssKiB * 1024)],
      ["peak RSS: docker-registry", mib(stats.registryMaxRssKiB * 1024)],
      ["peak RSS: builder (node)", mib(stats.builderMaxRssKiB * 1024)],
    ];
    const width = Math.max(...rows.map(([k]) => k.length));
    for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

await main();
