/**
 * A Redfish BMC for emulated servers: sushy-tools' emulator (PyPI, hash-pinned in
 * sushy-tools.requirements.txt) in front of a libvirt (test/helpers/libvirt.ts), on the
 * test's loopback (or an address of the test's own network), with HTTP basic auth from an htpasswd file (bcrypt, as it requires):
 * Ironic's redfish driver powers the VMs, sets their boot device and boot mode, reads their
 * state and inserts virtual media (an ISO it downloads into libvirt's "default" pool and
 * attaches as a CD-ROM) through it, as it would a server's BMC.
 *
 * Installed once into a venv of the build host's Debian python3 (system site packages:
 * Debian's python3-libvirt), kept in the build cache by the requirements' digest.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa, type ResultPromise } from "execa";
import { cacheRoot } from "../../builder/cache.js";
import { OVMF } from "./libvirt.js";

const REQUIREMENTS = join(import.meta.dirname, "sushy-tools.requirements.txt");
const PYTHON = "/usr/bin/python3";

export async function ensureSushyTools(): Promise<string> {
  const text = await readFile(REQUIREMENTS, "utf8");
  const venv = join(cacheRoot(), "python", `sushy-tools-${createHash("sha256").update(text).digest("hex").slice(0, 16)}`);
  if (existsSync(join(venv, ".complete"))) return venv;
  await rm(venv, { recursive: true, force: true });
  await execa(PYTHON, ["-m", "venv", "--system-site-packages", venv]);
  const installed = await execa(
    join(venv, "bin/pip"),
    ["install", "--quiet", "--disable-pip-version-check", "--require-hashes", "--no-deps", "-r", REQUIREMENTS],
    { reject: false, all: true },
  );
  if (installed.exitCode !== 0)
    throw new Error(
      `cannot install sushy-tools from PyPI (${String(installed.all).trim().split("\n").pop()}); 'npm run e2e:metal3' installs it before the test leaves the network (scripts/prepare-e2e-metal3.ts)`,
    );
  const check = await execa(join(venv, "bin/python"), ["-c", "import libvirt, sushy_tools"], { reject: false, all: true });
  if (check.exitCode !== 0) throw new Error(`sushy-tools cannot use libvirt: ${check.all} (install python3-libvirt: scripts/setup-host.sh)`);
  await writeFile(join(venv, ".complete"), "");
  return venv;
}

export interface Bmc {
  /** http://<listen address>:PORT: a system is <url>/redfish/v1/Systems/<libvirt domain uuid>. */
  url: string;
  log: string;
  child: ResultPromise;
  stop(): Promise<void>;
}

export async function startBmc(opts: {
  work: string;
  libvirtUri: string;
  port: number;
  username: string;
  password: string;
  /** Default 127.0.0.1. */ listenIp?: string;
}): Promise<Bmc> {
  const venv = await ensureSushyTools();
  const python = join(venv, "bin/python");
  const hashed = (
    await execa(python, ["-c", "import bcrypt, sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt()).decode())", opts.password])
  ).stdout.trim();
  const htpasswd = join(opts.work, "bmc.htpasswd");
  await writeFile(htpasswd, `${opts.username}:${hashed}\n`);
  const config = join(opts.work, "sushy-emulator.conf");
  await writeFile(
    config,
    [
      `SUSHY_EMULATOR_LISTEN_IP = '${opts.listenIp ?? "127.0.0.1"}'`,
      `SUSHY_EMULATOR_LISTEN_PORT = ${opts.port}`,
      `SUSHY_EMULATOR_LIBVIRT_URI = '${opts.libvirtUri}'`,
      `SUSHY_EMULATOR_AUTH_FILE = '${htpasswd}'`,
      "SUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False",
      // UEFI is the VMs' own OVMF (test/helpers/libvirt.ts), not sushy's default (Secure Boot code, 2 MiB variables).
      `SUSHY_EMULATOR_BOOT_LOADER_MAP = {'UEFI': {'x86_64': '${OVMF.code}'}, 'Legacy': {'x86_64': None}}`,
      `SUSHY_EMULATOR_SECURE_BOOT_DISABLED_NVRAM = '${OVMF.vars}'`,
      "",
    ].join("\n"),
  );
  const log = join(opts.work, "sushy-emulator.log");
  const child = execa(join(venv, "bin/sushy-emulator"), ["--config", config], { reject: false, stdout: { file: log }, stderr: { file: log } });
  const url = `http://${opts.listenIp ?? "127.0.0.1"}:${opts.port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (typeof child.exitCode === "number") throw new Error(`sushy-emulator exited (${child.exitCode}):\n${(await readFile(log, "utf8")).slice(-2000)}`);
    const answer = await fetch(`${url}/redfish/v1/`).catch(() => undefined);
    if (answer) break;
    if (Date.now() > deadline) throw new Error(`sushy-emulator did not answer within 120 s:\n${(await readFile(log, "utf8")).slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  return {
    url,
    log,
    child,
    async stop() {
      child.kill();
      await child;
    },
  };
}
