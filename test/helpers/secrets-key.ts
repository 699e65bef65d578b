/**
 * The appliance's secrets-key script (overlays/usr/lib/icn-bootstrap/secrets-key) run on
 * this machine: its directories moved into a test folder, the image's age (1.3, with its
 * passphrase plugin) first in PATH, and an emulated TPM 2.0 (swtpm, the TPM QEMU guests get)
 * that systemd-creds reaches through libtss2's swtpm TCTI.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { artifactPaths } from "../../builder/sources/index.js";
import { REPO } from "./cli.js";

export const SECRETS_KEY_SCRIPT = join(REPO, "overlays/usr/lib/icn-bootstrap/secrets-key");

export interface SecretsKeyPlace {
  /** The data partition's key folder. */
  keys: string;
  /** The folder in memory (/run) where the clear keys and the API server's file go. */
  runtime: string;
  /** The API server's EncryptionConfiguration. */
  config: string;
  siteEnv: string;
  stamps: string;
  /** The image's age, age-keygen and age-plugin-batchpass (the pinned builds), by name. */
  bin: string;
}

const AGE_TOOLS = ["age", "age-keygen", "age-plugin-batchpass"];

/** Builds the image's age tools when the cache has none (a Go build: call it from a hook, not a test). */
export async function buildSecretsKeyTools(): Promise<void> {
  await artifactPaths(AGE_TOOLS);
}

export async function secretsKeyPlace(dir: string, siteEnv: Record<string, string> = {}): Promise<SecretsKeyPlace> {
  await mkdir(dir, { recursive: true });
  const place = {
    keys: join(dir, "keys"),
    runtime: join(dir, "run"),
    config: join(dir, "run", "encryption.yaml"),
    siteEnv: join(dir, "site.env"),
    stamps: join(dir, "stamps"),
    bin: join(dir, "bin"),
  };
  await mkdir(place.bin, { recursive: true });
  const tools = await artifactPaths(AGE_TOOLS);
  for (const name of AGE_TOOLS) await symlink(tools[name]!, join(place.bin, name));
  await writeSiteEnv(place, siteEnv);
  return place;
}

export async function writeSiteEnv(place: SecretsKeyPlace, values: Record<string, string>): Promise<void> {
  await writeFile(
    place.siteEnv,
    Object.entries(values)
      .map(([name, value]) => `${name}=${value}\n`)
      .join(""),
  );
}

export function runSecretsKey(place: SecretsKeyPlace, args: string[], env: Record<string, string> = {}) {
  return execa("sh", [SECRETS_KEY_SCRIPT, ...args], {
    reject: false,
    all: true,
    env: {
      ICN_SECRETS_KEYS_DIR: place.keys,
      ICN_SECRETS_RUNTIME_DIR: place.runtime,
      ICN_SECRETS_SITE_ENV: place.siteEnv,
      ICN_BOOTSTRAP_STAMPS: place.stamps,
      ICN_KUBERNETES: "true",
      PATH: `${place.bin}:${process.env.PATH}`,
      ...env,
    },
  });
}

export interface Swtpm {
  /** systemd-creds' --tpm2-device for it. */
  device: string;
  /**
   * Power-cycles it, its state kept: without the kernel's resource manager (/dev/tpmrm0)
   * nothing flushes the sessions a process leaves, and after three the TPM refuses more.
   */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** A TPM 2.0 emulator with its state in `dir` (made once with a SHA-256 PCR bank, as firmware would). */
export async function startSwtpm(dir: string): Promise<Swtpm> {
  await mkdir(join(dir, "state"), { recursive: true });
  if (!existsSync(join(dir, "state", "tpm2-00.permall")))
    await execa("swtpm_setup", ["--tpm2", "--tpmstate", join(dir, "state"), "--pcr-banks", "sha256", "--overwrite"]);
  const socket = join(dir, "tpm.sock");
  let child: ChildProcess | undefined;
  const start = async () => {
    await rm(socket, { force: true });
    await rm(`${socket}.ctrl`, { force: true });
    child = spawn(
      "swtpm",
      [
        "socket",
        "--tpm2",
        "--tpmstate",
        `dir=${join(dir, "state")}`,
        "--server",
        `type=unixio,path=${socket}`,
        "--ctrl",
        `type=unixio,path=${socket}.ctrl`,
        "--flags",
        "not-need-init,startup-clear",
      ],
      { stdio: "ignore" },
    );
    for (let i = 0; i < 100 && !(existsSync(socket) && existsSync(`${socket}.ctrl`)); i++) await new Promise((resolve) => setTimeout(resolve, 100));
    if (!existsSync(socket)) {
      child.kill("SIGKILL");
      throw new Error(`swtpm did not open ${socket}`);
    }
  };
  const stop = async () => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child!.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  };
  await start();
  return {
    device: `swtpm:path=${socket}`,
    restart: async () => {
      await stop();
      await start();
    },
    stop,
  };
}
