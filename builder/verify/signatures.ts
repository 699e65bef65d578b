/**
 * `verify --key`: the signatures of the report, the image and the SBOM, one check each,
 * before the image's own checks. The report comes first: it holds the sha256 of every
 * image, so a signed report vouches for a USB stick's bytes, which have no bundle of
 * their own.
 */
import { access, readFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { bundlePathFor, verifySignature, type TrustedKey } from "../../common/signature.js";
import type { CheckResult } from "./verify.js";

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

function check(name: string, verdict: { ok: boolean; reason: string }): CheckResult {
  return { name, ok: verdict.ok, detail: verdict.reason, problems: [] };
}

export async function verifySignatures(opts: { image?: string; reportPath: string; keys: TrustedKey[] }): Promise<CheckResult[]> {
  const { image, reportPath, keys } = opts;
  const checks: CheckResult[] = [];
  const report = await verifySignature(reportPath, bundlePathFor(reportPath), keys);
  checks.push(check("report signature", report));

  if (image) {
    // Beside the image, else beside the report (an image copied elsewhere on its own).
    const besideReport = join(dirname(reportPath), `${basename(image)}.sigstore.json`);
    const bundle = (await exists(bundlePathFor(image))) || !(await exists(besideReport)) ? bundlePathFor(image) : besideReport;
    checks.push(check("image signature", await verifySignature(image, bundle, keys)));
  } else {
    checks.push(
      check(
        "image signature",
        report.ok
          ? { ok: true, reason: "a device has no bundle of its own: the signed report's sha256 of the USB image vouches for its bytes (disk bytes, below)" }
          : { ok: false, reason: "a device has no bundle of its own, and the report that would vouch for its bytes is not signed by a trusted key" },
      ),
    );
  }

  const sbomFile = await readFile(reportPath, "utf8")
    .then((text) => (JSON.parse(text) as { sbomFile?: string }).sbomFile)
    .catch(() => undefined);
  const sbom = sbomFile && join(dirname(reportPath), sbomFile);
  if (sbom && (await exists(sbom))) checks.push(check("SBOM signature", await verifySignature(sbom, bundlePathFor(sbom), keys)));
  return checks;
}
