/**
 * A compute node network-boots on the provisioning network and is inspected by the real
 * Ironic, everything from the appliance's build: the Ironic image's Ironic, its
 * boot-file server (nginx, port 6180) and its DHCP/TFTP server (dnsmasq-start, as
 * Deployment ironic-dnsmasq runs it), each with bubblewrap on the image's root, and the
 * deploy ramdisk (images/ipa-ramdisk), fetched by Ironic from a file server at the URL the
 * appliance gives the baremetal-operator (http://127.0.0.1:8080/boot/...).
 *
 * The network is a bridge in a network namespace the test makes (the appliance's
 * provisioning address 172.22.0.1/24 on it), with the node VM's tap on it and nothing
 * else: the VM has a blank disk and boots from its NIC (QEMU's iPXE ROM). Ironic's node
 * uses the fake-hardware type, whose power and boot-device calls do nothing: there is
 * no BMC here (the BMC emulator's turn is the whole-deployment e2e), so the test powers
 * the VM on itself when Ironic waits for the node. The chain is otherwise the product's:
 * DHCP → iPXE → Ironic's boot.ipxe → the node's iPXE script → the agent → inspection
 * data in Ironic (CPU, RAM, NIC with PCI ids, disk). QEMU's NIC option ROM is iPXE
 * itself, so that node skips the TFTP step. A second node, with UEFI firmware (OVMF) and
 * no option ROM, network-boots as a server's firmware does: its own PXE client gets
 * snponly.efi over TFTP, that iPXE gets Ironic's script, and the deploy kernel starts;
 * from the kernel on nothing depends on the firmware.
 */
import { runStages } from "../../builder/pipeline.js";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { ensureLockedDebs } from "../../builder/debian/fetch.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir } from "../../builder/stage.js";
import { FILES_ROOT } from "../../builder/stages/files.js";
import { readRamdisk, type RamdiskFiles } from "../../builder/stages/ramdisk.js";
import { logTail, startIronicPod, stopIronicPod, unpackIronic, untilServersUp, type IronicPod } from "../helpers/ironic-pod.js";
import { inImage } from "../helpers/oci-rootfs.js";

const NETNS = `icn-netboot-${process.pid}`;
const BRIDGE = "prov0";
const TAP = "node0";
const UEFI_TAP = "node1";
const UEFI_MAC = "52:54:00:22:00:02";
const ADDRESS = "172.22.0.1/24";
const APPLIANCE = "172.22.0.1";
const DHCP_RANGE = "172.22.0.10-172.22.0.20";
const MAC = "52:54:00:22:00:01";
const DISK_SERIAL = "ICN-NETBOOT-DISK";
const CPUS = 2;
const MEMORY_MIB = 2048;
const NODE_TIMEOUT_S = 1800;

let work: string;
let files: RamdiskFiles;
let pod: IronicPod;
let fileServer: ChildProcess | undefined;

const ip = (...args: string[]) => execa("ip", args);
const inNetns = (...args: string[]) => execa("ip", ["netns", "exec", NETNS, ...args]);

/** Ironic's API inside the namespace, with the credentials it was started with. */
async function ironic<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<{ status: number; json: T }> {
  const args = [
    "-s",
    "-w",
    "\\n%{http_code}",
    "-X",
    method,
    "-u",
    `metal3:${pod.password}`,
    "-H",
    "X-OpenStack-Ironic-API-Version: 1.89",
    "-H",
    "Content-Type: application/json",
    ...(body ? ["-d", JSON.stringify(body)] : []),
    `http://${APPLIANCE}:6385${path}`,
  ];
  const result = await inNetns("curl", ...args);
  const lines = result.stdout.split("\n");
  const status = Number(lines.pop());
  const text = lines.join("\n");
  return { status, json: (text ? JSON.parse(text) : {}) as T };
}

const until = <T>(what: string, probe: () => Promise<T | undefined>, timeoutS: number, everyMs = 2000) =>
  untilServersUp(pod.servers, what, probe, timeoutS * 1000, everyMs);
const logOf = async (name: string) => {
  const server = pod.servers.find((s) => s.name === name);
  return server ? logTail(server) : "";
};

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-netboot-"));
  const definition = await loadDefinition(DEFAULT_DEFINITION);
  const lock = await loadLock(DEFAULT_LOCK);
  await ensureLockedDebs(lock);
  const [ramdisk] = (await runStages({ definition: { ...definition, osImages: ["ipa-ramdisk"] }, lock, stagesDir: stagesDir(), sections: ["os-images"] }))
    .osImages;
  files = await readRamdisk(ramdisk!.image!);
  const content = await runStages({ definition, lock, lockPath: DEFAULT_LOCK, stagesDir: stagesDir(), sections: ["content"], stopAfterImages: true });
  const ironicRoot = await unpackIronic(content.images!.dir, work);

  // The provisioning network: a bridge with the appliance's address, the node's tap on it, nothing else.
  await ip("netns", "add", NETNS);
  await inNetns("ip", "link", "set", "lo", "up");
  await inNetns("ip", "link", "add", BRIDGE, "type", "bridge");
  await inNetns("ip", "addr", "add", ADDRESS, "dev", BRIDGE);
  await inNetns("ip", "link", "set", BRIDGE, "up");
  await inNetns("ip", "tuntap", "add", "dev", TAP, "mode", "tap");
  await inNetns("ip", "link", "set", TAP, "master", BRIDGE, "up");
  await inNetns("ip", "tuntap", "add", "dev", UEFI_TAP, "mode", "tap");
  await inNetns("ip", "link", "set", UEFI_TAP, "master", BRIDGE, "up");

  // The appliance's file server, as far as Ironic needs it: the deploy ramdisk at its URL on loopback.
  const served = join(ramdisk!.image!.dir, "tree", FILES_ROOT);
  fileServer = spawn("ip", ["netns", "exec", NETNS, "python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", served], { stdio: "ignore" });

  pod = await startIronicPod({
    root: ironicRoot,
    work,
    network: { netns: NETNS },
    provisioning: { PROVISIONING_INTERFACE: BRIDGE, PROVISIONING_ADDRESS: ADDRESS, DHCP_RANGE },
    // No BMC in this test: a node whose power and boot-device calls do nothing.
    env: {
      OS_DEFAULT__ENABLED_HARDWARE_TYPES: "ipmi,redfish,fake-hardware",
      OS_DEFAULT__ENABLED_POWER_INTERFACES: "ipmitool,redfish,fake",
      OS_DEFAULT__ENABLED_MANAGEMENT_INTERFACES: "ipmitool,redfish,noop,fake",
    },
  });
  await until("Ironic's API", async () => ((await ironic("GET", "/v1/nodes").catch(() => ({ status: 0 }))).status === 200 ? true : undefined), 900);
}, 60 * 60_000);

/** An A query to the appliance's name server from the provisioning network: the response code and addresses. */
async function dnsLookup(name: string): Promise<{ rcode: number; addresses: string[] }> {
  const script = `
import socket, struct, sys, json
name = sys.argv[1]
query = struct.pack(">HHHHHH", 0x1c3b, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.sendto(query, (sys.argv[2], 53))
reply = s.recv(512)
rcode, answers = reply[3] & 15, struct.unpack(">H", reply[6:8])[0]
at = len(query); addresses = []
for _ in range(answers):
    at += 2; rtype, _, _, length = struct.unpack(">HHIH", reply[at:at + 10]); at += 10
    if rtype == 1: addresses.append(socket.inet_ntoa(reply[at:at + length]))
    at += length
print(json.dumps({"rcode": rcode, "addresses": addresses}))
`;
  return JSON.parse((await inNetns("python3", "-c", script, name, APPLIANCE)).stdout);
}

afterAll(async () => {
  await stopIronicPod(pod);
  fileServer?.kill();
  await execa("ip", ["netns", "delete", NETNS], { reject: false });
  if (work) await rm(work, { recursive: true, force: true });
});

describe("network boot on the provisioning network", () => {
  it("serves Ironic's boot files read-only, without listings, and DHCP and DNS (the appliance's name only) on the provisioning interface only", async () => {
    const code = async (...args: string[]) => (await inNetns("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", ...args)).stdout;
    await until("the boot-file server", async () => ((await code(`http://${APPLIANCE}:6180/`).catch(() => "")) === "403" ? true : undefined), 120, 1000);
    expect(await code("-X", "PUT", "-d", "x", `http://${APPLIANCE}:6180/written-by-a-stranger`)).toBe("403");
    expect(await code("-X", "POST", "-d", "x", `http://${APPLIANCE}:6180/`)).toBe("403");
    const sockets = (await inNetns("ss", "-lnup")).stdout;
    expect(sockets).toMatch(/dnsmasq/);
    // DHCP and DNS bound to the provisioning bridge only (bind-dynamic: per interface).
    for (const line of sockets.split("\n").filter((l) => l.includes("dnsmasq")))
      expect(line).toMatch(new RegExp(`%${BRIDGE}\\b|${APPLIANCE.replace(/\./g, "\\.")}:`));
    expect(sockets).toMatch(new RegExp(`${APPLIANCE.replace(/\./g, "\\.")}:53\\s.*dnsmasq`));
    // The name server knows the appliance's name and nothing else: it forwards nowhere.
    expect(await dnsLookup("bootstrap.icn")).toEqual({ rcode: 0, addresses: [APPLIANCE] });
    expect((await dnsLookup("example.com")).addresses).toEqual([]);
    // A range outside the network is refused with what is wrong, before anything listens.
    const bad = await inImage(pod.root, ["/usr/local/bin/dnsmasq-start"], {
      env: { PROVISIONING_INTERFACE: BRIDGE, PROVISIONING_ADDRESS: ADDRESS, DHCP_RANGE: "10.0.0.5-10.0.0.9" },
    });
    expect(bad.exitCode).toBe(2);
    expect(bad.all).toMatch(/DHCP range 10\.0\.0\.5-10\.0\.0\.9 is not inside the provisioning network 172\.22\.0\.0\/24/);
  });

  it(
    "a node with a blank disk boots from its NIC, runs the deploy ramdisk and is inspected by Ironic",
    { timeout: (NODE_TIMEOUT_S + 300) * 1000 },
    async () => {
      const { node, state, at } = await nodeWaitingForInspection("node-0", MAC);
      const inspectWait = at();
      // Ironic has rendered its iPXE entry script and the node's own script (by MAC) into http_root, served on 6180.
      const script = (await inNetns("curl", "-sf", `http://${APPLIANCE}:6180/boot.ipxe`)).stdout;
      expect(script).toMatch(/^#!ipxe/);
      const nodeScript = (await inNetns("curl", "-sf", `http://${APPLIANCE}:6180/pxelinux.cfg/${MAC.replace(/:/g, "-")}`)).stdout;
      expect(nodeScript).toContain(`ipa-inspection-callback-url=http://${APPLIANCE}:6385/v1/continue_inspection`);
      expect(nodeScript).toContain(`http://${APPLIANCE}:6180/${node}/deploy_kernel`);
      const disk = join(work, "node-disk.qcow2");
      await execa("qemu-img", ["create", "-q", "-f", "qcow2", disk, "8G"]);
      const milestones: Record<string, string> = {};
      // The firmware and iPXE write to the screen; the serial console starts with the kernel.
      const watch: [string, RegExp][] = [
        ["the kernel", /Linux version/],
        ["the agent", /Starting ironic-python-agent/],
      ];
      const lines: string[] = [];
      const vm: BootResult = await bootImage({
        image: disk,
        diskSize: "8G",
        serial: DISK_SERIAL,
        firmware: "bios",
        cpus: CPUS,
        memoryMiB: MEMORY_MIB,
        timeoutSeconds: NODE_TIMEOUT_S,
        keepRunning: true,
        netns: NETNS,
        tap: { ifname: TAP, mac: MAC },
        networkBoot: true,
        readyPattern: /Starting ironic-python-agent version: \S+/,
        failurePattern: /Kernel panic.*|Failed to start .*/,
        onLine: (line) => {
          lines.push(line);
          for (const [name, pattern] of watch) if (!milestones[name] && pattern.test(line)) milestones[name] = at();
        },
      });
      try {
        expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}\n--- dnsmasq:\n${await logOf("dnsmasq")}`).toBe(true);
        const inspected = await until(
          "the end of inspection",
          async () => {
            const s = await state();
            if (s.provision_state === "inspect failed") throw new Error(`inspection failed: ${s.last_error}\n${lines.slice(-40).join("\n")}`);
            return s.provision_state === "manageable" ? s : undefined;
          },
          NODE_TIMEOUT_S,
        );
        expect(inspected.last_error).toBeNull();
        const { json } = await ironic<{
          inventory: {
            cpu: { count: number };
            memory: { physical_mb: number };
            interfaces: { mac_address: string; vendor?: string; product?: string; ipv4_address?: string }[];
            disks: { serial?: string; size: number }[];
          };
        }>("GET", `/v1/nodes/${node}/inventory`);
        const { inventory } = json;
        expect(inventory.cpu.count).toBe(CPUS);
        expect(inventory.memory.physical_mb).toBe(MEMORY_MIB);
        const nic = inventory.interfaces.find((i) => i.mac_address === MAC);
        expect([nic?.vendor, nic?.product]).toEqual(["0x1af4", "0x0001"]);
        // The address dnsmasq gave it, from the site's range.
        const lastOctet = Number(nic?.ipv4_address?.split(".")[3]);
        expect(nic?.ipv4_address).toMatch(/^172\.22\.0\.\d+$/);
        expect(lastOctet).toBeGreaterThanOrEqual(10);
        expect(lastOctet).toBeLessThanOrEqual(20);
        expect(inventory.disks.find((d) => d.serial === DISK_SERIAL)?.size).toBe(8 * 1024 ** 3);
        // Ironic's own record of the inspection (its default hooks): the node's architecture and its port.
        const properties = (await ironic<{ properties: Record<string, unknown> }>("GET", `/v1/nodes/${node}`)).json.properties;
        expect(properties).toMatchObject({ cpu_arch: "x86_64" });
        const ports = (await ironic<{ ports: { address: string }[] }>("GET", `/v1/ports?node=${node}`)).json.ports;
        expect(ports.map((p) => p.address)).toEqual([MAC]);
        const leases = await readFile(pod.leases!, "utf8");
        expect(leases).toContain(MAC);
        // The installed OS's router and name server: the appliance (the network has no other).
        const offered = await logOf("dnsmasq");
        expect(offered).toMatch(new RegExp(`option:\\s+3 router\\s+${APPLIANCE.replace(/\./g, "\\.")}`));
        expect(offered).toMatch(new RegExp(`option:\\s+6 dns-server\\s+${APPLIANCE.replace(/\./g, "\\.")}`));
        console.log(
          `network boot (${vm.accel}): inspect wait after ${inspectWait}; ${Object.entries(milestones)
            .map(([k, v]) => `${k} ${v}`)
            .join(", ")}; inspected (manageable) after ${at()}`,
        );
      } finally {
        await vm.stop?.();
      }
    },
  );

  it("a node with UEFI firmware gets snponly.efi over TFTP, and iPXE chains to Ironic's script and the deploy kernel", { timeout: 1200_000 }, async () => {
    const { at } = await nodeWaitingForInspection("node-uefi", UEFI_MAC);
    const disk = join(work, "uefi-node-disk.qcow2");
    await execa("qemu-img", ["create", "-q", "-f", "qcow2", disk, "1G"]);
    const vm: BootResult = await bootImage({
      image: disk,
      diskSize: "1G",
      firmware: "uefi",
      cpus: 1,
      memoryMiB: MEMORY_MIB,
      timeoutSeconds: 900,
      keepRunning: true,
      netns: NETNS,
      tap: { ifname: UEFI_TAP, mac: UEFI_MAC },
      networkBoot: true,
      firmwarePxe: true,
      // The kernel Ironic's script named, started by iPXE's EFI build: the chain is done.
      readyPattern: /Linux version \S+/,
      failurePattern: /Kernel panic.*/,
    });
    try {
      const dnsmasq = await readFile(pod.servers.find((server) => server.name === "dnsmasq")!.log, "utf8");
      expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}\n--- dnsmasq:\n${dnsmasq}`).toBe(true);
      // OVMF's PXE client (client-arch 7, no iPXE tag) was offered snponly.efi and fetched it over TFTP; that iPXE then got Ironic's script.
      expect(dnsmasq).toMatch(/vendor class: PXEClient:Arch:00007.*\n(?:.*\n)*?.*tags: efi, prov0\s*\n(?:.*\n)*?.*bootfile-name\s+snponly\.efi/);
      expect(dnsmasq).toMatch(/sent \S*snponly\.efi to 172\.22\.0\.\d+/);
      expect(dnsmasq).toMatch(/tags: ipxe, efi, prov0\s*\n(?:.*\n)*?.*bootfile-name\s+http:\/\/172\.22\.0\.1:6180\/boot\.ipxe/);
      expect(await readFile(pod.leases!, "utf8")).toContain(UEFI_MAC);
      console.log(`UEFI network boot (${vm.accel}): the deploy kernel running after ${at()}`);
    } finally {
      await vm.stop?.();
    }
  });
});

/** An Ironic node for `mac` (fake-hardware, iPXE, the agent's inspection), moved to inspect wait: its iPXE script is written and Ironic waits for it. */
async function nodeWaitingForInspection(name: string, mac: string) {
  const created = await ironic<{ uuid: string }>("POST", "/v1/nodes", {
    name,
    driver: "fake-hardware",
    boot_interface: "ipxe",
    inspect_interface: "agent",
    deploy_interface: "direct",
    driver_info: { deploy_kernel: `http://127.0.0.1:8080/${files.kernel.path}`, deploy_ramdisk: `http://127.0.0.1:8080/${files.initramfs.path}` },
  });
  expect(created.status, JSON.stringify(created.json)).toBe(201);
  const node = created.json.uuid;
  expect((await ironic("POST", "/v1/ports", { node_uuid: node, address: mac, pxe_enabled: true })).status).toBe(201);
  const state = async () => (await ironic<{ provision_state: string; last_error: string | null }>("GET", `/v1/nodes/${node}`)).json;
  expect((await ironic("PUT", `/v1/nodes/${node}/states/provision`, { target: "manage" })).status).toBe(202);
  await until(`${name} manageable`, async () => ((await state()).provision_state === "manageable" ? true : undefined), 300);
  const started = Date.now();
  const at = () => `${((Date.now() - started) / 1000).toFixed(0)} s`;
  expect((await ironic("PUT", `/v1/nodes/${node}/states/provision`, { target: "inspect" })).status).toBe(202);
  // Ironic has written the node's iPXE script and "powered it on": the test does the powering.
  await until(
    `Ironic waiting for ${name} (inspect wait)`,
    async () => {
      const s = await state();
      if (s.provision_state === "inspect failed") throw new Error(`inspection failed before the node booted: ${s.last_error}`);
      return s.provision_state === "inspect wait" ? true : undefined;
    },
    600,
  );
  return { node, state, at };
}
