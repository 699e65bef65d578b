/**
 * Ironic's deploy ramdisk (images/ipa-ramdisk), as the build serves it: its kernel and
 * initramfs booted in QEMU as a compute node network-boots them, with the kernel command
 * line Ironic gives (ipa-api-url, ipa-inspection-callback-url). The node's only network
 * leads to a recording stand-in for Ironic's API on the host's loopback (the real Ironic
 * takes this place in the Metal3 test): the agent must inspect the machine, post what it
 * found (CPU, RAM, NICs with PCI ids, disks), then look its node up to wait for work, as
 * it does before a deployment.
 */
import { createServer, type Server } from "node:http";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { constants, gunzipSync } from "node:zlib";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage } from "../../builder/boot/qemu.js";
import { ensureLockedDebs } from "../../builder/debian/fetch.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { buildOsImages, loadOsRecipe } from "../../builder/images/os.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir } from "../../builder/stage.js";
import { FILES_ROOT } from "../../builder/stages/files.js";
import { BOOT_FILES_PATH, readRamdisk, type RamdiskFiles } from "../../builder/stages/ramdisk.js";

const BOOT_TIMEOUT_S = 900;
/** Where the node finds "Ironic": a guestfwd address on its user network. */
const IRONIC = "10.0.2.100:6385";
const NODE_UUID = "5f2c3a8e-0d7b-4c55-9a3e-3c1f0b7d2a10";
const MAC = "52:54:00:1c:0a:01";
const DISK_SERIAL = "ICN-NODE-DISK-1";
const MEMORY_MIB = 2048;
const CPUS = 2;

interface Inventory {
  cpu: { count: number; architecture: string };
  memory: { physical_mb: number };
  interfaces: { name: string; mac_address: string; ipv4_address?: string; vendor?: string; product?: string; pxe_enabled?: boolean }[];
  disks: { name: string; size: number; serial?: string; rotational?: boolean }[];
  system_vendor: { manufacturer: string; product_name: string };
  boot: { current_boot_mode: string };
}

let work: string;
let files: RamdiskFiles;
let boot: string;
let server: Server;
let port: number;
const requests: { method: string; url: string; at: number }[] = [];
let inspection: (body: { inventory: Inventory }) => void;
const inspected = new Promise<{ inventory: Inventory }>((resolve) => (inspection = resolve));
let lookedUp: (url: string) => void;
const lookup = new Promise<string>((resolve) => (lookedUp = resolve));

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-ipa-ramdisk-"));
  const definition = await loadDefinition(DEFAULT_DEFINITION);
  expect(definition.osImages).toContain("ipa-ramdisk");
  const lock = await loadLock(DEFAULT_LOCK);
  await ensureLockedDebs(lock);
  const [built] = await buildOsImages({ definition: { ...definition, osImages: ["ipa-ramdisk"] }, lock, stagesDir: stagesDir() });
  files = await readRamdisk(built!.image!);
  boot = join(built!.image!.dir, "tree", FILES_ROOT);
  server = createServer((req, res) => {
    requests.push({ method: req.method ?? "", url: req.url ?? "", at: Date.now() });
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v1/continue_inspection") {
        inspection(JSON.parse(Buffer.concat(chunks).toString("utf8")));
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ uuid: NODE_UUID }));
        return;
      }
      if (req.method === "GET" && req.url?.startsWith("/v1/lookup")) lookedUp(req.url);
      // Nothing else is Ironic's here: the agent keeps asking, as it does while a node waits.
      res.writeHead(404, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
}, 40 * 60_000);

afterAll(async () => {
  server?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("Ironic's deploy ramdisk", () => {
  it("is a kernel and an initramfs on the file server, each with its sha256sum", async () => {
    const recipe = await loadOsRecipe("ipa-ramdisk");
    expect(files.kernel.path).toBe(`${BOOT_FILES_PATH}/${recipe.ramdisk!.kernel}`);
    expect(files.initramfs.path).toBe(`${BOOT_FILES_PATH}/${recipe.ramdisk!.initramfs}`);
    for (const file of [files.kernel, files.initramfs]) {
      const path = join(boot, file.path);
      expect((await stat(path)).size).toBe(file.size);
      expect(await readFile(`${path}.sha256sum`, "utf8")).toBe(`${file.sha256}  ${file.path.split("/").pop()}\n`);
      expect((await execa("sha256sum", [path])).stdout.split(" ")[0]).toBe(file.sha256);
    }
    // An x86 bzImage (its boot protocol header "HdrS" at 0x202) and a gzip stream holding a newc cpio.
    const kernel = await readFile(join(boot, files.kernel.path));
    expect(kernel.subarray(0x202, 0x206).toString("latin1")).toBe("HdrS");
    const initramfs = await readFile(join(boot, files.initramfs.path));
    expect(gunzipSync(initramfs.subarray(0, 64 * 1024), { finishFlush: constants.Z_SYNC_FLUSH }).subarray(0, 6).toString("latin1")).toBe("070701");
    console.log(`deploy ramdisk: kernel ${(files.kernel.size / 1024 / 1024).toFixed(1)} MiB (Linux ${files.kernelRelease}), initramfs ${(files.initramfs.size / 1024 / 1024).toFixed(1)} MiB`);
  });

  it("boots, inspects the machine and reports CPU, RAM, NICs, disks, then waits for its node", { timeout: (BOOT_TIMEOUT_S + 120) * 1000 }, async () => {
    const disk = join(work, "node-disk.qcow2");
    await execa("qemu-img", ["create", "-q", "-f", "qcow2", disk, "8G"]);
    const relay = join(import.meta.dirname, "..", "helpers", "tcp-relay.mjs");
    const started = Date.now();
    const lines: string[] = [];
    const vm = await bootImage({
      image: disk,
      diskSize: "8G",
      serial: DISK_SERIAL,
      firmware: "bios",
      cpus: CPUS,
      memoryMiB: MEMORY_MIB,
      timeoutSeconds: BOOT_TIMEOUT_S,
      keepRunning: true,
      kernel: { kernel: join(boot, files.kernel.path), initrd: join(boot, files.initramfs.path), append: `console=ttyS0 ipa-api-url=http://${IRONIC} ipa-inspection-callback-url=http://${IRONIC}/v1/continue_inspection` },
      guestForwards: [`tcp:${IRONIC}-cmd:${process.execPath} ${relay} ${port}`],
      macAddress: MAC,
      readyPattern: /Starting ironic-python-agent version: (\S+)/,
      failurePattern: /Kernel panic.*|Failed to start .*|Failed to execute .*/,
      onLine: (line) => lines.push(line),
    });
    try {
      expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
      const agentUp = (Date.now() - started) / 1000;
      const timeout = (what: string) => new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no ${what} within ${BOOT_TIMEOUT_S} s of boot; console:\n${lines.slice(-30).join("\n")}`)), BOOT_TIMEOUT_S * 1000 - (Date.now() - started)));
      const { inventory } = await Promise.race([inspected, timeout("inspection data")]);
      const inspectedAfter = (Date.now() - started) / 1000;
      expect(inventory.cpu.count).toBe(CPUS);
      expect(inventory.cpu.architecture).toBe("x86_64");
      expect(inventory.memory.physical_mb).toBe(MEMORY_MIB);
      const nic = inventory.interfaces.find((i) => i.mac_address === MAC);
      expect(nic, JSON.stringify(inventory.interfaces)).toBeDefined();
      // virtio-net's PCI ids, and the address DHCP gave it.
      expect([nic!.vendor, nic!.product]).toEqual(["0x1af4", "0x0001"]);
      expect(nic!.ipv4_address).toMatch(/^10\.0\.2\.\d+$/);
      const nodeDisk = inventory.disks.find((d) => d.serial === DISK_SERIAL);
      expect(nodeDisk, JSON.stringify(inventory.disks)).toBeDefined();
      expect(nodeDisk!.size).toBe(8 * 1024 ** 3);
      expect(inventory.system_vendor.manufacturer).toBe("QEMU");
      expect(inventory.boot.current_boot_mode).toBe("bios");
      // Inspected, the agent looks its node up by the id Ironic answered with (it then heartbeats, ready for a deployment).
      const url = await Promise.race([lookup, timeout("lookup")]);
      expect(new URL(url, "http://x").searchParams.get("node_uuid")).toBe(NODE_UUID);
      expect(new URL(url, "http://x").searchParams.get("addresses")).toContain(MAC);
      console.log(`deploy ramdisk (${vm.accel}): agent started after ${agentUp.toFixed(0)} s, inspection data after ${inspectedAfter.toFixed(0)} s (${inventory.interfaces.length} NIC, ${inventory.disks.length} disk), lookup after ${((Date.now() - started) / 1000).toFixed(0)} s`);
    } finally {
      await vm.stop?.();
    }
  });
});
