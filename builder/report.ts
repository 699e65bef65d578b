import { rename, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { sha256Text, tempSibling } from "./cache.js";
import { formatBytes, formatSeconds } from "./log.js";
import type { BuildResult } from "./pipeline.js";
import { buildBom, serializeBom } from "./sbom/cyclonedx.js";

/** The files a build writes beside its images. */
export function reportPaths(outDir: string, name: string) {
  return { report: join(outDir, `${name}.report.json`), sbom: join(outDir, `${name}.cdx.json`), contents: join(outDir, `${name}.contents.txt`) };
}

async function writeAtomically(path: string, text: string): Promise<void> {
  const temp = tempSibling(path);
  await writeFile(temp, text);
  await rename(temp, path);
}

/**
 * What went into the image: the CycloneDX SBOM (same build, same bytes), the root
 * filesystem's contents manifest, and the report: per-stage sizes and times (these
 * differ from build to build by nature), where each .deb came from, and what
 * `icn-bootstrap verify` checks an image against.
 */
export async function writeReport(outDir: string, name: string, result: BuildResult, totalSeconds: number): Promise<ReturnType<typeof reportPaths>> {
  const paths = reportPaths(outDir, name);
  const sbom = serializeBom(buildBom(result.sbom));
  await writeAtomically(paths.sbom, sbom);
  await writeAtomically(paths.contents, result.verification.contents);
  const { contents: _contents, ...verification } = result.verification;
  const report = {
    name,
    builtAt: new Date().toISOString(),
    totalSeconds,
    stages: result.stages.map(({ name, key, reused, seconds, bytes }) => ({ name, key, reused, seconds, bytes })),
    images: result.images,
    charts: result.charts,
    sbomFile: basename(paths.sbom),
    verification: { ...verification, contentsFile: basename(paths.contents), sbomSha256: sha256Text(sbom) },
    sbom: {
      debianPackages: Object.entries(result.packages).map(([name, version]) => ({ name, version })),
      /** Every pinned .deb of the build (root filesystem and the images), and where this build took it from. */
      debianFiles: result.debianFiles,
      containerImages: result.containerImages ?? [],
    },
  };
  await writeAtomically(paths.report, JSON.stringify(report, null, 2));
  return paths;
}

export function summary(result: BuildResult, paths: ReturnType<typeof reportPaths>, totalSeconds: number): string {
  const lines = ["", "stage         result    time      size"];
  for (const stage of result.stages) {
    lines.push(
      `${stage.name.padEnd(13)} ${(stage.reused ? "reused" : "built").padEnd(9)} ${formatSeconds(stage.seconds * 1000).padEnd(9)} ${formatBytes(stage.bytes)}`,
    );
  }
  lines.push("", `built in ${formatSeconds(totalSeconds * 1000)}:`);
  for (const image of Object.values(result.images)) {
    lines.push(`  ${image.path}`, `    size ${formatBytes(image.apparentBytes)} (allocated ${formatBytes(image.allocatedBytes)})  sha256 ${image.sha256}`);
  }
  for (const chart of result.charts) {
    lines.push(`  ${chart.path}  (the components' Helm chart: docs/developer-path.md)`, `    size ${formatBytes(chart.apparentBytes)}  sha256 ${chart.sha256}`);
  }
  const { sbom } = result;
  lines.push(
    `  ${paths.sbom}  (CycloneDX 1.6 SBOM: ${sbom.debian.length} Debian packages, ${sbom.goBinaries.length} Go binaries, ${sbom.containerImages.length} container images with ${new Set(sbom.containerImages.flatMap((i) => i.npmPackages.map((p) => `${p.name}@${p.version}`))).size} bundled npm packages and ${new Set(sbom.containerImages.flatMap((i) => (i.pythonPackages ?? []).map((p) => `${p.name}@${p.version}`))).size} PyPI packages, ${sbom.files.length} served files)`,
  );
  lines.push(`  ${paths.report}  (stage sizes and times; what 'icn-bootstrap verify' checks)`);
  return lines.join("\n");
}
