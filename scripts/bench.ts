/**
 * Build and boot benchmark: prints figures, each next to a baseline measured in the same
 * run (no timed assertions). Uses a fresh cache directory so the cold build is really cold.
 *
 *   npm run bench            # cold build, overlay-only rebuild, sizes, boot-to-ready vs plain Debian
 */
import { mkdir, mkdtemp, readFile, rm, stat, writeFile, copyFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { execa } from "execa";
import { bootImage } from "../builder/boot/qemu.js";
import { formatBytes } from "../builder/log.js";

const repo = resolve(import.meta.dirname, "..");
const work = await mkdtemp(join(tmpdir(), "icn-bench-"));
const cache = join(work, "cache");
const env = { ICN_BOOTSTRAP_CACHE: cache };

async function timedBuild(args: string[]): Promise<number> {
  const started = Date.now();
  const result = await execa("node", ["--import", "tsx", join(repo, "builder/cli.ts"), "build", ...args], { cwd: repo, env, reject: false, all: true });
  if (result.exitCode !== 0) throw new Error(`build failed:\n${result.all}`);
  return (Date.now() - started) / 1000;
}

// A definition next to an overlay we can change, so the rebuild is an overlay-only change.
const defDir = join(work, "definition");
await mkdir(join(defDir, "extra/etc"), { recursive: true });
const yaml = (await readFile(join(repo, "appliance.yaml"), "utf8")).replace(/^overlays: \[\]$/m, "overlays: [extra]");
await writeFile(join(defDir, "appliance.yaml"), yaml);
await copyFile(join(repo, "appliance.lock.yaml"), join(defDir, "appliance.lock.yaml"));
await writeFile(join(defDir, "extra/etc/bench-marker"), "first\n");
const out = join(work, "out");
const buildArgs = ["--definition", join(defDir, "appliance.yaml"), "--out", out];

console.error("bench: cold build (empty cache)…");
const cold = await timedBuild(buildArgs);
await writeFile(join(defDir, "extra/etc/bench-marker"), "second\n");
console.error("bench: rebuild after an overlay-only change…");
const rebuild = await timedBuild(buildArgs);
const noChange = await timedBuild(buildArgs);

const img = await stat(join(out, "icn-bootstrap.img"));
const qcow2 = await stat(join(out, "icn-bootstrap.qcow2"));

console.error("bench: boot to ready (appliance qcow2, BIOS) and a plain Debian boot of the same kernel and root (no appliance units) to its login prompt…");
const appliance = await bootImage({ image: join(out, "icn-bootstrap.qcow2"), firmware: "bios", timeoutSeconds: 1200 });
const baseDisk = (await execa("sh", ["-c", `ls -d ${cache}/stages/disk/*/disk.raw | head -n1`])).stdout.trim();
const plain = await bootImage({ image: baseDisk, firmware: "uefi", timeoutSeconds: 1200, readyPattern: /login:/ });
const applianceUsb = await bootImage({ image: join(out, "icn-bootstrap.img"), firmware: "uefi", timeoutSeconds: 1200 });

const rows: [string, string][] = [
  ["cold build (empty cache)", `${cold.toFixed(1)} s`],
  ["rebuild, overlay-only change", `${rebuild.toFixed(1)} s  = ${((rebuild / cold) * 100).toFixed(1)}% of cold (target < 10%)`],
  ["rebuild, nothing changed", `${noChange.toFixed(1)} s  = ${((noChange / cold) * 100).toFixed(1)}% of cold`],
  ["USB raw image", `${formatBytes(img.size)} apparent, ${formatBytes(img.blocks * 512)} allocated`],
  ["qcow2 image", `${formatBytes(qcow2.blocks * 512)} on disk (${formatBytes(qcow2.size)} file)`],
  [`appliance qcow2 boot to ready (bios, ${appliance.accel})`, appliance.ready ? `${appliance.seconds.toFixed(1)} s` : `FAILED: ${appliance.failure}`],
  [
    `appliance USB boot to ready (uefi, ${applianceUsb.accel})`,
    applianceUsb.ready ? `${applianceUsb.seconds.toFixed(1)} s` : `FAILED: ${applianceUsb.failure}`,
  ],
  [
    `plain Debian boot to login (uefi, USB, ${plain.accel})`,
    plain.ready ? `${plain.seconds.toFixed(1)} s  (appliance USB/plain = ${(applianceUsb.seconds / plain.seconds).toFixed(2)}x)` : `FAILED: ${plain.failure}`,
  ],
];
const width = Math.max(...rows.map(([k]) => k.length));
console.log(rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n"));
await mkdir(join(repo, "bench-results"), { recursive: true });
await writeFile(
  join(repo, "bench-results", `build-${new Date().toISOString().replace(/[:.]/g, "-")}.json`),
  JSON.stringify(
    { cold, rebuild, noChange, imgBytes: img.size, imgAllocated: img.blocks * 512, qcow2Bytes: qcow2.blocks * 512, appliance, applianceUsb, plain },
    null,
    2,
  ),
);
await rm(work, { recursive: true, force: true });
