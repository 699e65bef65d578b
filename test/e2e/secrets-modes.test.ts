/**
 * The key of the bootstrap cluster's Secrets on a server without a TPM (no swtpm here), as
 * the site chooses in site.yaml: `secrets.key: medium`, a stick labelled ICN-SECRETS that
 * must be in at every boot; `secrets.key: passphrase`, typed at the console at every boot
 * (answered here over SSH through systemd's password-agent protocol, as
 * systemd-tty-ask-password-agent would). The medium's first boot, under UEFI firmware, runs
 * to the ready marker: a Secret written then, the key and the medium's identity are searched
 * for on the stopped appliance's disk (BIOS with a TPM: npm run e2e:appliance). The other
 * boots are watched until the key is open: what follows is the same as with a TPM.
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { freePort } from "../../builder/registry/server.js";
import { runCli } from "../helpers/cli.js";
import { fileHolds } from "../helpers/disk-search.js";
import { writeDefinition } from "../helpers/definition.js";
import { printFailedUnitJournal, sshToVm, sshTry } from "../helpers/ssh.js";

const BOOT_TIMEOUT_S = 30 * 60;
/** A first boot with Kubernetes to the ready marker under emulation (npm run e2e:appliance gives it as long). */
const FIRST_BOOT_TIMEOUT_S = 70 * 60;
const KEYS = "/var/lib/icn-bootstrap/secrets-key";
const PASSPHRASE = "correct horse battery staple, typed at the console";

let work: string;
let image: string;
let key: string;
const running: BootResult[] = [];

/** A site disk whose site.yaml keeps the Secrets' key as `secrets` says. */
async function siteDisk(name: string, secrets: string): Promise<string> {
  const dir = join(work, name);
  await mkdir(join(dir, "manifests"), { recursive: true });
  await writeFile(join(dir, "site.yaml"), `version: 1\nsecrets:\n${secrets}`);
  const disk = join(work, `${name}.img`);
  const written = await runCli(["site", "write", dir, "--new", disk]);
  expect(written.exitCode, written.all).toBe(0);
  return disk;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-secrets-modes-"));
  key = join(work, "id_ed25519");
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
  const publicKey = (await readFile(`${key}.pub`, "utf8")).trim();
  const definition = await writeDefinition((d) => {
    d.access = { sshAuthorizedKeys: [publicKey] };
  });
  const build = await runCli(["build", "--definition", definition, "--format", "qcow2", "--out", join(work, "out")]);
  expect(build.exitCode, build.all).toBe(0);
  image = join(work, "out", "icn-bootstrap.qcow2");
}, 90 * 60_000);

afterAll(async () => {
  await Promise.all(running.map((vm) => vm.stop?.()));
});

/** A boot without a TPM, on `disk` (kept between boots), until a console line matches `until`. */
async function bootUntil(
  disk: string,
  extraDisks: string[],
  until: RegExp,
  sshPort?: number,
  how: { firmware?: "bios" | "uefi"; timeoutSeconds?: number } = {},
): Promise<{ vm: BootResult; lines: string[] }> {
  const lines: string[] = [];
  const vm = await bootImage({
    image,
    firmware: how.firmware ?? "bios",
    tpm: false,
    timeoutSeconds: how.timeoutSeconds ?? BOOT_TIMEOUT_S,
    memoryMiB: 4096,
    disk,
    diskSize: "32G",
    extraDisks,
    readyPattern: until,
    keepRunning: sshPort !== undefined,
    tcgMultiThread: true,
    hostForwards: sshPort ? [`tcp:127.0.0.1:${sshPort}-:22`] : [],
    onLine: (line) => lines.push(line),
    beforeStopOnFailure: sshPort === undefined ? undefined : printFailedUnitJournal(key, sshPort),
  });
  if (vm.stop) running.push(vm);
  expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
  console.log(`boot without a TPM (${how.firmware ?? "bios"}): '${until.source}' after ${vm.seconds.toFixed(0)}s (${vm.accel})`);
  return { vm, lines };
}

async function waitForLine(lines: string[], pattern: RegExp, seconds: number): Promise<string> {
  for (let waited = 0; waited < seconds; waited += 2) {
    const line = lines.find((l) => pattern.test(l));
    if (line) return line;
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
  throw new Error(`no console line matched ${pattern} within ${seconds}s; last lines:\n${lines.slice(-20).join("\n")}`);
}

/** Until icn-secrets-key.service has finished (the key open), over SSH; throws when it failed. */
async function keyOpened(sshPort: number): Promise<void> {
  for (let tries = 0; tries < 300; tries++) {
    const state = (await sshTry(key, { port: sshPort }, "systemctl show -P ActiveState icn-secrets-key.service")).output.trim();
    if (state === "active") return;
    if (state === "failed") throw new Error((await sshTry(key, { port: sshPort }, "journalctl -b --no-pager -u icn-secrets-key.service")).output);
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
  throw new Error("icn-secrets-key.service did not finish within 10 minutes");
}

/**
 * Answers the appliance's pending question whose message matches `message`, as a password
 * agent does (systemd.io/PASSWORD_AGENTS): "+" and the answer, to the question's socket.
 */
async function answer(sshPort: number, message: string, text: string): Promise<void> {
  const script = [
    "for ask in /run/systemd/ask-password/ask.*; do",
    '  [ -e "$ask" ] || continue',
    `  grep -qF 'Message=${message}' "$ask" || continue`,
    `  socket=$(sed -n 's/^Socket=//p' "$ask")`,
    `  python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"+" + sys.argv[2].encode(), sys.argv[1])' "$socket" '${text}'`,
    "  exit 0",
    "done",
    "exit 1",
  ].join("\n");
  for (let tries = 0; tries < 300; tries++) {
    if ((await sshTry(key, { port: sshPort }, script)).ok) return;
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
  throw new Error(`the appliance did not ask '${message}' within 10 minutes`);
}

describe("the Secrets' key without a TPM", () => {
  it(
    "on a separate medium: written to the stick at the first boot (UEFI), nothing of it or of a Secret on the disk, needed at every boot, removable once the key is open",
    { timeout: (FIRST_BOOT_TIMEOUT_S + 2 * BOOT_TIMEOUT_S) * 1000 },
    async () => {
      const site = await siteDisk("site-medium", "  key: medium\n");
      const stick = join(work, "stick.img");
      await execa("truncate", ["-s", "64M", stick]);
      await execa("mkfs.vfat", ["-n", "ICN-SECRETS", stick]);
      const disk = join(work, "medium.qcow2");

      // The whole first boot, under UEFI: the key on the stick opens the API server's.
      const sshPort = await freePort();
      const first = await bootUntil(disk, [site, stick], /ICN-BOOTSTRAP-READY/, sshPort, { firmware: "uefi", timeoutSeconds: FIRST_BOOT_TIMEOUT_S });
      expect(first.lines.join("\n")).toMatch(/the medium labelled ICN-SECRETS can be removed/);
      const identity = (await execa("mtype", ["-i", stick, "::icn-secrets-key.identity"])).stdout;
      expect(identity).toMatch(/^AGE-SECRET-KEY-1[0-9A-Z]+$/m);
      const ssh = (command: string) => sshToVm(key, sshPort, command);
      const kubectl = "kubectl --kubeconfig /etc/kubernetes/admin.conf";
      const atRest = `at-rest-${randomBytes(12).toString("hex")}`;
      await ssh(`${kubectl} -n default create secret generic at-rest --from-literal=value=${atRest}`);
      const secretsKey = await ssh("icn-secrets-key status; base64 -w0 /run/icn-bootstrap/secrets/$(head -n1 /var/lib/icn-bootstrap/secrets-key/order).key");
      console.log(`the Secrets' key:\n  ${secretsKey.stdout.split("\n").slice(0, -1).join("\n  ")}`);
      expect(secretsKey.stdout).toMatch(/^kept: medium \(labelled ICN-SECRETS\)/m);
      const clearKey = Buffer.from(secretsKey.stdout.trim().split("\n").pop()!, "base64");
      expect(clearKey).toHaveLength(32);
      await ssh("sync");
      await ssh("systemctl poweroff").catch(() => undefined);
      await first.vm.stop!();
      const searched = Date.now();
      const needles = [Buffer.from(atRest), clearKey, Buffer.from(clearKey.toString("base64")), Buffer.from(identity.trim())];
      const onTheDisk = await fileHolds(disk, needles);
      console.log(`searched the stopped appliance's disk (${disk}) in ${((Date.now() - searched) / 1000).toFixed(0)} s`);
      expect(onTheDisk, "the Secret's value, the key, the key in base64, the medium's identity").toEqual([false, false, false, false]);
      // The search can fail: the stick holds the identity.
      expect(await fileHolds(stick, [Buffer.from(identity.trim())])).toEqual([true]);

      // Without the stick the boot waits for it, and says so.
      await bootUntil(disk, [site], /insert the medium labelled ICN-SECRETS \(the key of the cluster's Secrets\)/);
      // With it again, the same identity opens the key.
      await bootUntil(disk, [site, stick], /the medium labelled ICN-SECRETS can be removed/);
      expect((await execa("mtype", ["-i", stick, "::icn-secrets-key.identity"])).stdout).toBe(identity);
    },
  );

  it(
    "under a passphrase: asked on the console at the first boot and at every boot after, never on the disk",
    { timeout: 3 * BOOT_TIMEOUT_S * 1000 },
    async () => {
      const site = await siteDisk("site-passphrase", "  key: passphrase\n");
      const disk = join(work, "passphrase.qcow2");
      const ssh = (port: number, command: string) => sshToVm(key, port, command);

      const sshPort = await freePort();
      const first = await bootUntil(disk, [site], /waiting for the passphrase of the key of the cluster's Secrets/, sshPort);
      await answer(sshPort, "A new passphrase for the key", PASSPHRASE);
      await answer(sshPort, "The same passphrase again", PASSPHRASE);
      await keyOpened(sshPort);
      const kept = (await ssh(sshPort, `ls ${KEYS}; cat ${KEYS}/wrapped-by; ls /run/icn-bootstrap/secrets`)).stdout.split("\n");
      expect(kept).toEqual(expect.arrayContaining(["identity.age", "order", "recipient", "wrapped-by", "passphrase", "encryption.yaml"]));
      expect(kept.some((f) => /^key-\S+\.wrapped$/.test(f))).toBe(true);
      expect(kept).not.toContain("identity");
      const found = await sshTry(key, { port: sshPort }, `grep -rlF '${PASSPHRASE}' /var/lib/icn-bootstrap /etc /root`);
      expect(found.output.trim()).toBe("");
      await first.vm.stop!();

      const nextPort = await freePort();
      const next = await bootUntil(disk, [site], /waiting for the passphrase of the key of the cluster's Secrets/, nextPort);
      await answer(nextPort, "Passphrase for the key", "not the passphrase at all");
      await waitForLine(next.lines, /the passphrase does not open the key of the cluster's Secrets; again/, 600);
      await answer(nextPort, "Passphrase for the key", PASSPHRASE);
      await keyOpened(nextPort);
      expect((await ssh(nextPort, "test -s /run/icn-bootstrap/secrets/encryption.yaml && echo open")).stdout.trim()).toBe("open");
      await next.vm.stop!();
    },
  );
});
