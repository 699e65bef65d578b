/**
 * `icn-bootstrap verify`: checks a disk image (raw .img, a USB stick's block device, or
 * a .qcow2) against the build's report, one check at a time, each naming what differs.
 */
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { execa } from "execa";
import { sha256Text } from "../cache.js";
import { sha256File } from "../../common/hash.js";
import { compareManifests, dumpExt4, treeManifest } from "../disk/contents.js";
import { SECTOR, type DiskLayout } from "../disk/layout.js";
import { UserError } from "../errors.js";
import { bootDigests, digestOutsideSite, rangeDigest, type BootDigests } from "./regions.js";
import { compareGpt } from "./partitions.js";
import { checkRegistry, type ExpectedImage } from "./registry.js";
import { checkSbom } from "./sbom.js";

export interface VerifyReport {
  name: string;
  images: Record<string, { path: string; apparentBytes: number; sha256: string }>;
  sbomFile: string;
  verification: {
    layout: DiskLayout;
    boot: BootDigests;
    contentsDigest: string;
    outsideSite?: string;
    contentsFile: string;
    sbomSha256: string;
    registry: { storage: string; images: ExpectedImage[] };
  };
}

export interface CheckResult {
  name: string;
  ok: boolean;
  detail: string;
  problems: string[];
}

export async function loadVerifyReport(path: string): Promise<VerifyReport> {
  let report: VerifyReport;
  try {
    report = JSON.parse(await readFile(path, "utf8"));
  } catch (error) {
    throw new UserError(
      `cannot read the build report ${path}: ${(error as Error).message}`,
      "pass the report the build wrote beside the image with --report FILE",
    );
  }
  if (!report.verification?.layout)
    throw new UserError(
      `${path} has no verification data`,
      "it was written by an older icn-bootstrap: rebuild the image, or use the report of a current build",
    );
  return report;
}

/** The disk as raw bytes: the file or device itself, or a temporary raw copy of a qcow2. */
async function rawDisk(image: string, scratch: string): Promise<{ path: string; format: string }> {
  const { stdout } = await execa("qemu-img", ["info", "--output=json", image]);
  const format = JSON.parse(stdout).format as string;
  if (format === "raw") return { path: image, format };
  const raw = join(scratch, "disk.raw");
  await execa("qemu-img", ["convert", "-f", format, "-O", "raw", image, raw]);
  return { path: raw, format };
}

const result = (name: string, problems: string[], okDetail: string, failDetail: string): CheckResult => ({
  name,
  ok: problems.length === 0,
  detail: problems.length === 0 ? okDetail : failDetail,
  problems,
});

export async function verifyImage(image: string, reportPath: string, opts: { scratch?: string } = {}): Promise<CheckResult[]> {
  const report = await loadVerifyReport(reportPath);
  const v = report.verification;
  const scratch = await mkdtemp(join(opts.scratch ?? tmpdir(), "icn-verify-"));
  try {
    const checks: CheckResult[] = [];
    const disk = await rawDisk(image, scratch);
    const layout = v.layout;
    const diskBytes = layout.totalSectors * SECTOR;
    const size = (await stat(disk.path)).size || Number((await execa("blockdev", ["--getsize64", disk.path], { reject: false })).stdout);
    if (size < diskBytes)
      throw new UserError(
        `${image} holds ${size} bytes, the image built is ${diskBytes}`,
        "check that IMAGE is the image (or the whole stick, e.g. /dev/sdb, not a partition)",
      );

    // The whole disk as built: a match here means every check below passes.
    const usb = report.images.usb;
    if (disk.format === "qcow2" && report.images.qcow2) {
      const actual = await sha256File(image);
      checks.push(
        result(
          "image file",
          actual === report.images.qcow2.sha256 ? [] : [`sha256 ${actual}, built ${report.images.qcow2.sha256}`],
          `sha256 ${actual} as built`,
          "the qcow2 file differs from the one built (the checks below say where, if anywhere, the disk differs)",
        ),
      );
    }
    if (usb) {
      const actual = await rangeDigest(disk.path, 0, diskBytes);
      const outsideSite = actual !== usb.sha256 && v.outsideSite ? await digestOutsideSite(disk.path, layout, diskBytes) : undefined;
      if (outsideSite && outsideSite === v.outsideSite) {
        checks.push(
          result(
            "disk bytes",
            [],
            `the USB image built, except its site partition (ICN-SITE), written since: its settings are the site's, not the build's`,
            "",
          ),
        );
      } else {
        checks.push(
          result(
            "disk bytes",
            actual === usb.sha256
              ? []
              : [
                  `sha256 of the first ${diskBytes} bytes is ${actual}, the USB image built is ${usb.sha256}${v.outsideSite ? "; it differs outside the site partition too" : ""}`,
                ],
            `the first ${diskBytes} bytes are the USB image built (sha256 ${usb.sha256})`,
            "the disk differs from the USB image built",
          ),
        );
      }
    }

    const gpt = await compareGpt(disk.path, layout);
    checks.push(
      result(
        "partition table",
        gpt,
        `GPT ${layout.diskGuid}: BIOS boot, EFI system, ${layout.site ? "site, " : ""}root as built; root filesystem UUID ${layout.rootFsUuid}`,
        "the partition table differs",
      ),
    );

    const boot = await bootDigests(disk.path, layout);
    const bootProblems = (Object.keys(v.boot) as (keyof BootDigests)[])
      .filter((k) => boot[k] !== v.boot[k])
      .map((k) => `${BOOT_REGIONS[k]}: sha256 ${boot[k]}, built ${v.boot[k]}`);
    checks.push(result("boot code", bootProblems, "MBR, BIOS boot partition (GRUB core.img) and EFI system partition as built", "boot code differs"));

    const tree = await dumpExt4(`${disk.path}?offset=${layout.root.start * SECTOR}`, scratch);
    try {
      const manifest = await treeManifest(tree);
      const digest = sha256Text(manifest);
      let problems: string[] = [];
      if (digest !== v.contentsDigest) {
        const expected = await readFile(join(dirname(reportPath), v.contentsFile), "utf8").catch(() => undefined);
        if (expected === undefined)
          problems = [
            `contents digest ${digest}, built ${v.contentsDigest} (${v.contentsFile} is not beside the report, so the files that differ cannot be named)`,
          ];
        else if (sha256Text(expected) !== v.contentsDigest)
          problems = [`${v.contentsFile} beside the report does not match the report's digest: it cannot be trusted`];
        else
          problems = compareManifests(expected, manifest).map(
            (d) =>
              `/${d.path}: ${d.actual === undefined ? "missing" : d.expected === undefined ? "not in the image built" : "differs"}${d.expected ? `\n  built: ${d.expected}` : ""}${d.actual ? `\n  found: ${d.actual}` : ""}`,
          );
      }
      const entries = manifest.split("\n").filter(Boolean).length;
      checks.push(
        result("root filesystem", problems, `${entries} entries, contents digest ${digest} as built`, `contents digest ${digest}, built ${v.contentsDigest}`),
      );

      const registry = await checkRegistry(join(tree.dir, v.registry.storage), v.registry.images);
      checks.push(
        result(
          "registry",
          registry.problems,
          `${v.registry.images.length} images, ${registry.blobs} blobs, every tag and blob as pinned`,
          "the seeded registry differs",
        ),
      );

      const sbom = await checkSbom(
        join(dirname(reportPath), report.sbomFile),
        v.sbomSha256,
        manifest,
        v.registry.images.map((i) => i.digest),
      );
      checks.push(
        result(
          "SBOM",
          sbom.problems,
          `${report.sbomFile} as written by the build; its ${sbom.checked} files and images are in the image with its sha256`,
          "the SBOM does not match the image",
        ),
      );
    } finally {
      await tree.remove();
    }
    return checks;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

const BOOT_REGIONS: Record<keyof BootDigests, string> = { mbr: "MBR (sector 0)", biosBoot: "BIOS boot partition", esp: "EFI system partition" };
