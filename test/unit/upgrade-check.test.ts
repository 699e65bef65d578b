/**
 * The appliance's own check before an upgrade writes an image (overlays/usr/lib/icn-bootstrap/upgrade-check:
 * Python and openssl, as on the appliance): the bundles `build --sign-key` writes
 * (common/signature.ts) verify with the right key; another key, a changed image, an image
 * that is not the report's, an unsigned or altered report each fail, named, exit 1.
 */
import { createHash, randomBytes } from "node:crypto";
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundlePathFor, writeSignature } from "../../common/signature.js";
import { loadSigningKey } from "../../builder/signing.js";

const CHECK = new URL("../../overlays/usr/lib/icn-bootstrap/upgrade-check", import.meta.url).pathname;
let work: string;
let release: string;
const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

async function signed(dir: string, files: string[]): Promise<void> {
  const key = await loadSigningKey({ keyPath: join(work, "sign.key"), env: {} });
  for (const file of files) await writeSignature(join(dir, file), key!.privateKey);
}

/** A release as the build writes it: the USB image, the report with its sha256, both signed. */
async function makeRelease(name: string): Promise<string> {
  const dir = join(work, name);
  await execa("mkdir", ["-p", dir]);
  const image = randomBytes(3 * 1024 * 1024 + 5);
  await writeFile(join(dir, "icn-bootstrap.img"), image);
  const report = {
    images: {
      usb: { path: "icn-bootstrap.img", apparentBytes: image.length, sha256: sha256(image) },
      qcow2: { path: "icn-bootstrap.qcow2", sha256: "0".repeat(64) },
    },
  };
  await writeFile(join(dir, "icn-bootstrap.report.json"), `${JSON.stringify(report, null, 2)}\n`);
  await signed(dir, ["icn-bootstrap.img", "icn-bootstrap.report.json"]);
  return dir;
}

function check(dir: string, key = "sign.pub", image = "icn-bootstrap.img") {
  return execa(CHECK, [join(dir, image), "--report", join(dir, "icn-bootstrap.report.json"), "--key", join(work, key)], { reject: false, all: true });
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-upgrade-check-"));
  for (const name of ["sign", "other"]) {
    await execa("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", `${name}.key`], { cwd: work });
    await execa("openssl", ["pkey", "-in", `${name}.key`, "-pubout", "-out", `${name}.pub`], { cwd: work });
  }
  release = await makeRelease("good");
});

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("upgrade-check on the appliance", () => {
  it("passes an image and report the build signed, with the build's public key", async () => {
    const result = await check(release);
    expect(result.all).toMatch(/^ok {4}report signature: .*icn-bootstrap\.report\.json\.sigstore\.json verified with .*sign\.pub$/m);
    expect(result.all).toMatch(/^ok {4}image sha256: [0-9a-f]{64}, as built$/m);
    expect(result.all).toMatch(/^ok {4}image signature: .*icn-bootstrap\.img\.sigstore\.json verified with/m);
    expect(result.all).toContain("may be written: all 3 checks passed");
    expect(result.exitCode, result.all).toBe(0);
  });

  it("fails with another key: neither signature verifies", async () => {
    const result = await check(release, "other.pub");
    expect(result.exitCode, result.all).toBe(1);
    expect(result.all).toMatch(/^FAIL {2}report signature: .* does not verify with any trusted key/m);
    expect(result.all).toMatch(/^FAIL {2}image signature: /m);
    expect(result.all).toContain("must not be written: report signature, image signature failed");
  });

  it("fails for an image changed after it was signed, naming both digests", async () => {
    const dir = await makeRelease("tampered");
    const bytes = await readFile(join(dir, "icn-bootstrap.img"));
    bytes[4096] = bytes[4096]! ^ 0x01;
    await writeFile(join(dir, "icn-bootstrap.img"), bytes);
    const result = await check(dir);
    expect(result.exitCode, result.all).toBe(1);
    expect(result.all).toMatch(/^ok {4}report signature/m);
    expect(result.all).toMatch(/^FAIL {2}image sha256: .* the build report gives [0-9a-f]{64}: not the image that was built$/m);
    expect(result.all).toMatch(/^FAIL {2}image signature: .* is not the file that was signed \(tampered or replaced\)/m);
  });

  it("fails for an unsigned report, or one altered to vouch for another image", async () => {
    const unsigned = await makeRelease("unsigned");
    await rm(bundlePathFor(join(unsigned, "icn-bootstrap.report.json")));
    const missing = await check(unsigned);
    expect(missing.exitCode, missing.all).toBe(1);
    expect(missing.all).toMatch(/^FAIL {2}report signature: not signed: there is no signature /m);

    // Another image with a report edited to give its sha256 (and the image's own bundle dropped): the report's signature breaks.
    const swapped = await makeRelease("swapped");
    const other = randomBytes(1024);
    await writeFile(join(swapped, "icn-bootstrap.img"), other);
    await rm(bundlePathFor(join(swapped, "icn-bootstrap.img")));
    const report = JSON.parse(await readFile(join(swapped, "icn-bootstrap.report.json"), "utf8"));
    report.images.usb.sha256 = sha256(other);
    await writeFile(join(swapped, "icn-bootstrap.report.json"), JSON.stringify(report));
    const result = await check(swapped);
    expect(result.exitCode, result.all).toBe(1);
    expect(result.all).toMatch(/^FAIL {2}report signature: .* is not the file that was signed/m);
    expect(result.all).not.toMatch(/image signature/);
  });

  it("a qcow2 is checked against the report's qcow2, and a missing file is a usage error (exit 2)", async () => {
    await copyFile(join(release, "icn-bootstrap.img"), join(release, "icn-bootstrap.qcow2"));
    const result = await check(release, "sign.pub", "icn-bootstrap.qcow2");
    expect(result.exitCode, result.all).toBe(1);
    expect(result.all).toMatch(/^FAIL {2}image sha256: .*icn-bootstrap\.qcow2 has sha256 [0-9a-f]{64}, the build report gives 0{64}/m);
    const absent = await check(release, "missing.pub");
    expect(absent.exitCode).toBe(2);
    expect(absent.all).toContain("missing.pub: no such file");
  });
});
