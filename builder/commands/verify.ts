import { access, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { UserError } from "../errors.js";
import { loadPublicKeys } from "../../common/signature.js";
import { verifySignatures } from "../verify/signatures.js";
import { verifyImage, type CheckResult } from "../verify/verify.js";
import type { Command } from "./command.js";

const MAX_PROBLEMS = 20;

export const verifyCommand: Command = {
  name: "verify",
  summary: "check an image (or a USB stick) against its build report before booting it",
  usage: `usage: icn-bootstrap verify IMAGE [--report FILE] [--key PUB.pem]...

Checks IMAGE (out/<name>.img, a USB stick's device such as /dev/sdb, or out/<name>.qcow2)
against the report the build wrote beside it: the disk's bytes, the partition table and
root filesystem UUID, the boot code (MBR, BIOS boot partition, EFI system partition),
the root filesystem's contents (every file's sha256, mode, owner and link target,
against <name>.contents.txt), the seeded registry (every tag and blob as pinned) and
the SBOM beside the report (as the build wrote it; the files it places in the root have
the sha256 it states).
Nothing is mounted; a qcow2 is converted to a temporary raw copy. Run it before the
first boot: first boot grows the root filesystem and writes the machine's identity.

With --key, the signatures come first: the report's, the image's and the SBOM's
Sigstore bundles (<file>.sigstore.json, written by 'build --sign-key') must verify with
one of the keys given. A missing signature, one by another key, or a file changed since
it was signed is a failed check that names the file and why. A USB stick's device has no
bundle of its own: the signed report's sha256 of the image vouches for its bytes (the
"disk bytes" check).

options:
  --report FILE   the build report (default: <name>.report.json beside IMAGE)
  --key PUB.pem   a trusted public key (ECDSA P-256, PEM); repeat for more than one

Exit status: 0 when every check passes, 1 when one fails (each difference is named).`,
  async run(argv) {
    const { values, positionals } = parseCommandArgs("verify", argv, { report: { type: "string" }, key: { type: "string", multiple: true } }, true);
    if (positionals.length !== 1) throw new UserError("verify needs exactly one IMAGE", "e.g. icn-bootstrap verify out/icn-bootstrap.img");
    const image = resolve(positionals[0]!);
    await access(image).catch(() => {
      throw new UserError(`image ${image} does not exist`, "give the path of an image built by 'icn-bootstrap build', or of the stick's device");
    });
    const reportPath = resolve(values.report ?? join(dirname(image), `${basename(image).replace(/\.(img|qcow2|raw)$/, "")}.report.json`));
    await access(reportPath).catch(() => {
      throw new UserError(`no build report at ${reportPath}`, "pass the report the build wrote beside the image with --report FILE");
    });
    const keys = await loadPublicKeys((values.key ?? []).map((k) => resolve(k)));
    console.log(`verify ${image} against ${reportPath}`);
    const checks: CheckResult[] = [];
    const print = (check: CheckResult) => {
      console.log(`  ${check.ok ? "ok  " : "FAIL"}  ${check.name}: ${check.detail}`);
      for (const problem of check.problems.slice(0, MAX_PROBLEMS)) console.log(`          ${problem.replace(/\n/g, "\n          ")}`);
      if (check.problems.length > MAX_PROBLEMS) console.log(`          … and ${check.problems.length - MAX_PROBLEMS} more`);
    };
    if (keys.length > 0) {
      const isFile = (await stat(image)).isFile();
      for (const check of await verifySignatures({ image: isFile ? image : undefined, reportPath, keys })) {
        checks.push(check);
        print(check);
      }
    } else console.log("  (signatures not checked: give the signing key's public key with --key PUB.pem)");
    for (const check of await verifyImage(image, reportPath)) {
      checks.push(check);
      print(check);
    }
    const failed = checks.filter((c) => !c.ok);
    if (failed.length > 0) {
      console.log(`verify: ${failed.length} of ${checks.length} checks failed: ${failed.map((c) => c.name).join(", ")}`);
      return 1;
    }
    console.log(`verify: all ${checks.length} checks passed`);
  },
};
