import { rename, writeFile } from "node:fs/promises";
import { tempSibling } from "./cache.js";
import { formatBytes, formatSeconds } from "./log.js";
import type { BuildResult } from "./pipeline.js";

/** What went into the image: an SBOM of packages plus per-stage sizes and times. */
export async function writeReport(path: string, name: string, result: BuildResult, totalSeconds: number): Promise<void> {
  const report = {
    name,
    builtAt: new Date().toISOString(),
    totalSeconds,
    stages: result.stages.map(({ name, key, reused, seconds, bytes }) => ({ name, key, reused, seconds, bytes })),
    images: result.images,
    sbom: {
      debianPackages: Object.entries(result.packages).map(([name, version]) => ({ name, version })),
      /** Every pinned .deb of the build (root filesystem and the images), and where this build took it from. */
      debianFiles: result.debianFiles,
      containerImages: result.containerImages ?? [],
    },
  };
  const temp = tempSibling(path);
  await writeFile(temp, JSON.stringify(report, null, 2));
  await rename(temp, path);
}

export function summary(result: BuildResult, reportPath: string, totalSeconds: number): string {
  const lines = ["", "stage         result    time      size"];
  for (const stage of result.stages) {
    lines.push(`${stage.name.padEnd(13)} ${(stage.reused ? "reused" : "built").padEnd(9)} ${formatSeconds(stage.seconds * 1000).padEnd(9)} ${formatBytes(stage.bytes)}`);
  }
  lines.push("", `built in ${formatSeconds(totalSeconds * 1000)}:`);
  for (const image of Object.values(result.images)) {
    lines.push(`  ${image.path}`, `    size ${formatBytes(image.apparentBytes)} (allocated ${formatBytes(image.allocatedBytes)})  sha256 ${image.sha256}`);
  }
  lines.push(`  ${reportPath}  (SBOM: ${Object.keys(result.packages).length} Debian packages, ${result.containerImages?.length ?? 0} container images; stage sizes and times)`);
  return lines.join("\n");
}
