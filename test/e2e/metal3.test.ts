/**
 * `npm run e2e:metal3`: Metal3 and Ironic inspect a compute node and put Linux on it,
 * offline, on emulated hardware. Everything runs in a network namespace of its own (the
 * npm script starts the run under `unshare --net`): loopback, and the provisioning
 * network, a bridge with the appliance's provisioning address (172.22.0.1/24) and the
 * compute node VM's NIC on it. Nothing routes anywhere else.
 *
 * Real, from the build: the baremetal-operator and Metal3's CRDs, Ironic with its
 * boot-file server (nginx, 6180) and its DHCP/TFTP server (dnsmasq-start), each run with
 * bubblewrap on its image's root as the appliance's pods run them; the deploy ramdisk
 * (images/ipa-ramdisk) and the compute nodes' OS image (images/compute-node) on a file
 * server at the URLs the appliance uses; a kube-apiserver; the BPA's SSH key and
 * cloud-init user-data Secret (bpa/controller/ssh.ts), given to the BareMetalHost.
 * Emulated: the server (a libvirt/QEMU VM, TCG here: no KVM) and its BMC (sushy-tools'
 * Redfish emulator in front of libvirt, test/helpers/bmc-emulator.ts); the file server is
 * Python's http.server over the build's file-server trees (the appliance's is nginx).
 *
 * What it shows, with the time of each state: a BareMetalHost goes registering →
 * inspecting → available → provisioning → provisioned, with the hardware the deploy
 * ramdisk found in Metal3's HardwareData; a wrong image checksum first ends in Metal3's
 * provisioning error (the cause in status.errorMessage), corrected it deploys; the node
 * then boots its OS image from its disk and answers SSH with the BPA's key. A second host
 * with a wrong BMC password ends in registration error and disturbs nothing; a third,
 * whose NIC is on a network without the appliance's DHCP (it never network-boots), ends in
 * inspection error when Ironic's inspection wait runs out (shortened here, by the
 * environment oslo.config reads, from the appliance's 30 minutes to INSPECT_WAIT_S).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ApiextensionsV1Api, KubeConfig, type V1CustomResourceDefinition } from "@kubernetes/client-node";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig, type BpaConfig } from "../../bpa/config/config.js";
import { ensureSshKey } from "../../bpa/controller/ssh.js";
import { makeClients, mergePatch, type Clients } from "../../bpa/runtime/kube.js";
import { makeLogger } from "../../bpa/runtime/log.js";
import { sshObjectNames } from "../../bpa/jobs/objects.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { readMetal3Manifests } from "../../builder/metal3/manifests.js";
import { stagesDir, runStages } from "../../builder/pipeline.js";
import { FILES_ROOT } from "../../builder/stages/files.js";
import { OS_IMAGES_PATH, readOsImage } from "../../builder/stages/os-image.js";
import { BOOT_FILES_PATH, readRamdisk } from "../../builder/stages/ramdisk.js";
import { startKubeTestServer, type KubeTestServer } from "../helpers/kube-apiserver.js";
import { startBmc, type Bmc } from "../helpers/bmc-emulator.js";
import { REPO } from "../helpers/cli.js";
import { phaseLog } from "../helpers/phases.js";
import { domainXml, startLibvirt, type Libvirt } from "../helpers/libvirt.js";
import { startIronicPod, unpackIronic, untilServersUp, type Server } from "../helpers/ironic-pod.js";
import { startInImage, stopInImage, unpackImage } from "../helpers/oci-rootfs.js";
import { sshArgs } from "../helpers/ssh.js";

const HOUR = 60 * 60_000;
const BMO_IMAGE = "quay.io/metal3-io/baremetal-operator:v0.13.2";
const NAMESPACE = "site-a";
const BRIDGE = "prov0";
/** A network without DHCP or anything else of the appliance's. */
const DEAD_BRIDGE = "dead0";
const INSPECT_WAIT_S = 300;
const ADDRESS = "172.22.0.1/24";
const APPLIANCE = "172.22.0.1";
const DHCP_RANGE = "172.22.0.10-172.22.0.20";
const BMC_PORT = 8000;
const BMC_USER = "admin";
const BMC_PASSWORD = `bmc-${Math.random().toString(36).slice(2)}`;
const NODE = { name: "node-0", uuid: randomUUID(), mac: "52:54:00:22:10:01", cpus: 2, memoryMiB: 2048, diskGiB: 10 };
const NO_PXE_NODE = { name: "node-no-pxe", uuid: randomUUID(), mac: "52:54:00:22:10:02", cpus: 1, memoryMiB: 512, diskGiB: 1 };
const VMEDIA_NODE = { name: "node-vmedia", uuid: randomUUID(), mac: "52:54:00:22:10:03", cpus: 2, memoryMiB: 2048, diskGiB: 10, firmware: "uefi" as const };
type Node = typeof NODE;
const bmhApi = { group: "metal3.io", version: "v1alpha1", plural: "baremetalhosts" };
const hwApi = { group: "metal3.io", version: "v1alpha1", plural: "hardwaredata" };

const { phase, summary: phaseSummary } = phaseLog("e2e:metal3");

interface Host {
  metadata: { name: string };
  status?: { operationalStatus?: string; errorType?: string; errorMessage?: string; poweredOn?: boolean; provisioning?: { state?: string } };
}

let work: string;
let kube: KubeTestServer;
let kc: KubeConfig;
let c: Clients;
let libvirt: Libvirt;
let bmc: Bmc;
let osImage: { url: string; sha256: string };
let bmoRoot: string;
let leases: string;
const servers: Server[] = [];
let fileServer: ChildProcess | undefined;

async function tail(log: string, chars = 3000): Promise<string> {
  return (await readFile(log, "utf8").catch(() => "")).slice(-chars);
}

/** Polls `probe`; fails at once when one of the test's servers exited (with its log), or with what `probe` throws. */
const until = <T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, everyMs = 3000) =>
  untilServersUp(servers, what, probe, timeoutMs, everyMs);

async function host(name: string): Promise<Host> {
  return (await c.custom.getNamespacedCustomObject({ ...bmhApi, namespace: NAMESPACE, name })) as Host;
}

async function shippedConfig(): Promise<BpaConfig> {
  const configMap = yaml.load(await readFile(join(REPO, "manifests/bpa/config.yaml"), "utf8")) as { data: Record<string, string> };
  return parseConfig(yaml.load(configMap.data["config.yaml"]!), "manifests/bpa/config.yaml");
}

/** The settings the appliance gives the baremetal-operator (its ConfigMap), with this run's Ironic. */
async function operatorSettings(): Promise<Record<string, string>> {
  const docs = yaml.loadAll(await readFile(join(REPO, "manifests/metal3/baremetal-operator.yaml"), "utf8")) as {
    kind: string;
    data?: Record<string, string>;
  }[];
  return docs.find((d) => d.kind === "ConfigMap")!.data!;
}

/** A BareMetalHost for `node` with the BPA's user-data (its SSH key), not cleaned, the OS on /dev/vda. */
async function createHost(node: Node, opts: { bmcAddress: string; bootMode: "legacy" | "UEFI"; image: Record<string, string> }): Promise<void> {
  await c.custom.createNamespacedCustomObject({
    ...bmhApi,
    namespace: NAMESPACE,
    body: {
      apiVersion: "metal3.io/v1alpha1",
      kind: "BareMetalHost",
      metadata: { name: node.name },
      spec: {
        online: true,
        bootMACAddress: node.mac,
        bootMode: opts.bootMode,
        bmc: { address: opts.bmcAddress, credentialsName: "bmc" },
        rootDeviceHints: { deviceName: "/dev/vda" },
        automatedCleaningMode: "disabled",
        userData: { name: sshObjectNames(await shippedConfig()).userData, namespace: NAMESPACE },
        image: opts.image,
      },
    },
  });
}

/** Logs each provisioning state a host passes through (with its time) and waits for some. */
function stateWatcher(node: Node) {
  let last = "";
  const note = async () => {
    const h = await host(node.name);
    const state = h.status?.provisioning?.state ?? "";
    if (state !== last) {
      phase(`${node.name}: ${state || "(new)"}${h.status?.errorType ? ` (${h.status.errorType}: ${h.status.errorMessage})` : ""}`);
      last = state;
    }
    return h;
  };
  return {
    note,
    until: (wanted: string[], timeoutMs: number, stopOnError = true, alsoEachTime?: () => Promise<void>) =>
      until(
        `${node.name} in ${wanted.join(" or ")}`,
        async () => {
          await alsoEachTime?.();
          const h = await note();
          if (stopOnError && h.status?.errorType)
            throw new Error(`${h.status.errorType}: ${h.status.errorMessage}\nconsole:\n${await tail(join(work, `${node.name}.console.log`))}`);
          return wanted.includes(h.status?.provisioning?.state ?? "") ? h : undefined;
        },
        timeoutMs,
        5000,
      ),
  };
}

/** Metal3's HardwareData for `node` holds what the deploy ramdisk found: the VM's CPUs, memory, NIC and disk. */
async function expectHardware(node: Node): Promise<void> {
  const hw = (await c.custom.getNamespacedCustomObject({ ...hwApi, namespace: NAMESPACE, name: node.name })) as {
    spec: {
      hardware: {
        cpu: { count: number };
        ramMebibytes: number;
        nics: { mac: string; model?: string; ip?: string }[];
        storage: { name: string; sizeBytes: number; serialNumber?: string }[];
      };
    };
  };
  expect(hw.spec.hardware.cpu.count).toBe(node.cpus);
  expect(hw.spec.hardware.ramMebibytes).toBe(node.memoryMiB);
  expect(hw.spec.hardware.nics.map((n) => n.mac)).toContain(node.mac);
  expect(hw.spec.hardware.storage.find((d) => d.serialNumber === `${node.name}-disk`)?.sizeBytes).toBe(node.diskGiB * 1024 ** 3);
  phase(
    `${node.name} inspected: ${hw.spec.hardware.cpu.count} CPUs, ${hw.spec.hardware.ramMebibytes} MiB, NICs ${hw.spec.hardware.nics.map((n) => `${n.mac} ${n.model ?? ""}`).join(", ")}, disks ${hw.spec.hardware.storage.map((d) => `${d.name} ${d.sizeBytes}`).join(", ")}`,
  );
}

/** Logs in to the provisioned `node` as root with the BPA's key (cloud-init took it from the config drive Ironic wrote), at the address inspection recorded, and runs `command`. */
async function sshWithBpaKey(node: Node, command: string): Promise<string> {
  const key = await c.core.readNamespacedSecret({ namespace: NAMESPACE, name: sshObjectNames(await shippedConfig()).privateKey });
  const keyFile = join(work, "bpa-key");
  await writeFile(keyFile, Buffer.from(key.data!["ssh-privatekey"]!, "base64").toString(), { mode: 0o600 });
  // The address inspection recorded (HardwareData: what the BPA's inventory uses) is the installed OS's too (dnsmasq's dhcp-ignore-clid).
  const hw = (await c.custom.getNamespacedCustomObject({ ...hwApi, namespace: NAMESPACE, name: node.name })) as {
    spec: { hardware: { nics: { mac: string; ip?: string }[] } };
  };
  const address = hw.spec.hardware.nics.find((n) => n.mac === node.mac)?.ip ?? "";
  expect(address).toMatch(/^172\.22\.0\.\d+$/);
  const ssh = () => execa("ssh", sshArgs(keyFile, { host: address }, `cloud-init status --wait >/dev/null; ${command}`, 10), { reject: false, all: true });
  const answer = await until(
    `SSH to ${node.name} at its inspected address ${address} with the BPA's key`,
    async () => {
      const r = await ssh();
      return r.exitCode === 0 ? String(r.all) : undefined;
    },
    HOUR,
    10_000,
  );
  const leased = (await readFile(leases, "utf8"))
    .split("\n")
    .map((l) => l.split(" "))
    .filter((f) => f[1] === node.mac)
    .map((f) => f[2]);
  expect(leased).toEqual([address]);
  phase(`${node.name} answers SSH at ${address}: ${answer.replace(/\n/g, " | ")}`);
  return answer;
}

/** The DHCP transactions (dnsmasq's log-dhcp lines share their xid) in which `mac` asked as a PXE or iPXE client. */
function pxeRequestsFrom(dnsmasqLog: string, mac: string): string[] {
  const byXid = new Map<string, string[]>();
  for (const line of dnsmasqLog.split("\n")) {
    const xid = /dnsmasq-dhcp[^:]*: (\d+) /.exec(line)?.[1];
    if (xid) byXid.set(xid, [...(byXid.get(xid) ?? []), line]);
  }
  return [...byXid.entries()]
    .filter(([, lines]) => lines.some((l) => l.toLowerCase().includes(mac)) && lines.some((l) => /vendor class: PXEClient|user class: iPXE/.test(l)))
    .map(([xid]) => xid);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-e2e-metal3-"));
  // The provisioning network: this process's own namespace (unshare --net), a bridge with the appliance's address.
  await execa("ip", ["link", "set", "lo", "up"]);
  await execa("ip", ["link", "add", BRIDGE, "type", "bridge"]);
  await execa("ip", ["addr", "add", ADDRESS, "dev", BRIDGE]);
  await execa("ip", ["link", "set", BRIDGE, "up"]);
  await execa("ip", ["link", "add", DEAD_BRIDGE, "type", "bridge"]);
  await execa("ip", ["link", "set", DEAD_BRIDGE, "up"]);

  const definition = await loadDefinition(DEFAULT_DEFINITION);
  const lock = await loadLock(DEFAULT_LOCK);
  const [computeNode, ramdisk] = (
    await runStages({ definition: { ...definition, osImages: ["compute-node", "ipa-ramdisk"] }, lock, stagesDir: stagesDir(), sections: ["os-images"] })
  ).osImages;
  const os = await readOsImage(computeNode!.image!);
  const ipa = await readRamdisk(ramdisk!.image!);
  const content = await runStages({ definition, lock, lockPath: DEFAULT_LOCK, stagesDir: stagesDir(), sections: ["content"], stopAfterImages: true });
  const ironicRoot = await unpackIronic(content.images!.dir, work);
  bmoRoot = join(work, "bmo-root");
  await unpackImage(content.images!.dir, BMO_IMAGE, bmoRoot);
  await mkdir(join(bmoRoot, "opt/metal3/auth"), { recursive: true });
  await writeFile(join(bmoRoot, "kubeconfig"), "");

  // The file server's tree as the appliance lays it out: boot/ (the ramdisk) and os-images/.
  const files = join(work, "files");
  await mkdir(files);
  await symlink(join(ramdisk!.image!.dir, "tree", FILES_ROOT, BOOT_FILES_PATH), join(files, BOOT_FILES_PATH));
  await symlink(join(computeNode!.image!.dir, "tree", FILES_ROOT, OS_IMAGES_PATH), join(files, OS_IMAGES_PATH));
  fileServer = spawn("python3", ["-m", "http.server", "8080", "--bind", "0.0.0.0", "--directory", files], { stdio: "ignore" });
  osImage = { url: `http://${APPLIANCE}:8080/${os.path}`, sha256: os.sha256 };
  phase(`build outputs ready: OS image ${(os.size / 1024 / 1024).toFixed(0)} MiB, deploy ramdisk ${(ipa.initramfs.size / 1024 / 1024).toFixed(0)} MiB`);

  kube = await startKubeTestServer();
  kc = new KubeConfig();
  kc.loadFromFile(kube.kubeconfigPath);
  c = makeClients(kc);
  // Every CRD of Metal3's (the operator watches more than BareMetalHost and HardwareData).
  const extensions = kc.makeApiClient(ApiextensionsV1Api);
  for (const text of Object.values((await readMetal3Manifests()).crds)) {
    for (const body of yaml.loadAll(text).filter(Boolean) as V1CustomResourceDefinition[]) await extensions.createCustomResourceDefinition({ body });
  }
  await until(
    "Metal3's CRDs established",
    async () => {
      const list = await extensions.listCustomResourceDefinition();
      const metal3 = list.items.filter((crd) => crd.spec.group === "metal3.io");
      return metal3.length > 0 && metal3.every((crd) => crd.status?.conditions?.some((cond) => cond.type === "Established" && cond.status === "True"))
        ? metal3.length
        : undefined;
    },
    120_000,
    1000,
  );
  await c.core.createNamespace({ body: { metadata: { name: NAMESPACE } } });

  const pod = await startIronicPod({
    root: ironicRoot,
    work,
    network: { hostNetwork: true },
    env: { OS_CONDUCTOR__INSPECT_WAIT_TIMEOUT: String(INSPECT_WAIT_S) },
    provisioning: { PROVISIONING_INTERFACE: BRIDGE, PROVISIONING_ADDRESS: ADDRESS, DHCP_RANGE },
  });
  servers.push(...pod.servers);
  leases = pod.leases!;
  await until("Ironic's API", async () => ((await fetch("http://127.0.0.1:6385/").catch(() => undefined))?.ok ? true : undefined), HOUR / 2);
  phase("Ironic, its boot-file server and DHCP running");

  const kubeconfig = join(work, "kubeconfig");
  await writeFile(kubeconfig, await readFile(kube.kubeconfigPath, "utf8"));
  const settings = await operatorSettings();
  const bmoLog = join(work, "baremetal-operator.log");
  servers.push({
    name: "baremetal-operator",
    log: bmoLog,
    child: startInImage(
      bmoRoot,
      ["/baremetal-operator", `--namespace=${NAMESPACE}`, "--webhook-port=0", "--metrics-addr=0", "--health-addr=127.0.0.1:9440"],
      bmoLog,
      {
        binds: { [kubeconfig]: "/kubeconfig", [pod.auth]: "/opt/metal3/auth" },
        env: {
          KUBECONFIG: "/kubeconfig",
          IRONIC_ENDPOINT: "http://127.0.0.1:6385/v1/",
          DEPLOY_KERNEL_URL: settings.DEPLOY_KERNEL_URL!,
          DEPLOY_RAMDISK_URL: settings.DEPLOY_RAMDISK_URL!,
          POD_NAMESPACE: NAMESPACE,
          POD_NAME: "bmo-e2e",
        },
        hostNetwork: true,
      },
    ),
  });

  libvirt = await startLibvirt(work);
  bmc = await startBmc({ work, libvirtUri: libvirt.uri, port: BMC_PORT, username: BMC_USER, password: BMC_PASSWORD });
  for (const [node, bridge] of [
    [NODE, BRIDGE],
    [NO_PXE_NODE, DEAD_BRIDGE],
    [VMEDIA_NODE, BRIDGE],
  ] as const) {
    const disk = join(work, `${node.name}.qcow2`);
    await execa("qemu-img", ["create", "-q", "-f", "qcow2", disk, `${node.diskGiB}G`]);
    const xml = join(work, `${node.name}.xml`);
    await writeFile(xml, domainXml({ ...node, disk, bridge, console: join(work, `${node.name}.console.log`), type: "qemu" }));
    await execa("virsh", ["-c", libvirt.uri, "define", xml]);
  }
  phase(`libvirt, the Redfish BMC emulator and the powered-off servers ${NODE.name}, ${NO_PXE_NODE.name} and ${VMEDIA_NODE.name} (UEFI) ready`);

  const log = makeLogger({ level: "warn", fields: { op: "e2e-metal3" } });
  await ensureSshKey(c, await shippedConfig(), log, NAMESPACE);
  await c.core.createNamespacedSecret({
    namespace: NAMESPACE,
    body: { metadata: { name: "bmc" }, stringData: { username: BMC_USER, password: BMC_PASSWORD } },
  });
  await c.core.createNamespacedSecret({
    namespace: NAMESPACE,
    body: { metadata: { name: "bmc-wrong" }, stringData: { username: BMC_USER, password: "not-the-password" } },
  });
}, 2 * HOUR);

afterAll(async () => {
  console.log(phaseSummary());
  await libvirt?.stop();
  await bmc?.stop();
  await Promise.all(servers.map((s) => stopInImage(s.child)));
  fileServer?.kill();
  await kube?.stop();
  for (const bridge of [BRIDGE, DEAD_BRIDGE]) await execa("ip", ["link", "del", bridge], { reject: false });
  if (work && process.env.ICN_KEEP_TEST_TMP !== "1") await rm(work, { recursive: true, force: true });
});

describe("Metal3 and Ironic put Linux on a compute node, offline", () => {
  it("a host with a wrong BMC password ends in registration error with the BMC's answer", { timeout: HOUR / 2 }, async () => {
    await c.custom.createNamespacedCustomObject({
      ...bmhApi,
      namespace: NAMESPACE,
      body: {
        apiVersion: "metal3.io/v1alpha1",
        kind: "BareMetalHost",
        metadata: { name: "wrong-password" },
        spec: {
          online: true,
          bootMACAddress: "52:54:00:22:10:99",
          bmc: { address: `redfish+http://127.0.0.1:${BMC_PORT}/redfish/v1/Systems/${NODE.uuid}`, credentialsName: "bmc-wrong" },
        },
      },
    });
    const failed = await until(
      "registration error for the wrong password",
      async () => {
        const h = await host("wrong-password");
        return h.status?.errorType === "registration error" ? h : undefined;
      },
      HOUR / 2,
    );
    phase(`wrong BMC password: registration error: ${failed.status!.errorMessage}`);
    expect(failed.status!.operationalStatus).toBe("error");
    expect(failed.status!.errorMessage).toMatch(/401|[Uu]nauthori[sz]ed|[Aa]uthentication|[Aa]ccess denied|credentials/);
    // It did not touch the server behind that BMC.
    expect((await execa("virsh", ["-c", libvirt.uri, "domstate", NODE.name])).stdout.trim()).toBe("shut off");
    await c.custom.deleteNamespacedCustomObject({ ...bmhApi, namespace: NAMESPACE, name: "wrong-password" });
  });

  it("a host that never network-boots ends in inspection error when Ironic's wait runs out", { timeout: HOUR / 2 }, async () => {
    await c.custom.createNamespacedCustomObject({
      ...bmhApi,
      namespace: NAMESPACE,
      body: {
        apiVersion: "metal3.io/v1alpha1",
        kind: "BareMetalHost",
        metadata: { name: NO_PXE_NODE.name },
        spec: {
          online: true,
          bootMACAddress: NO_PXE_NODE.mac,
          bootMode: "legacy",
          bmc: { address: `redfish+http://127.0.0.1:${BMC_PORT}/redfish/v1/Systems/${NO_PXE_NODE.uuid}`, credentialsName: "bmc" },
        },
      },
    });
    let poweredOn = false;
    const failed = await until(
      "inspection error for the host that never network-boots",
      async () => {
        poweredOn ||= (await execa("virsh", ["-c", libvirt.uri, "domstate", NO_PXE_NODE.name])).stdout.trim() === "running";
        const h = await host(NO_PXE_NODE.name);
        return h.status?.errorType ? h : undefined;
      },
      HOUR / 2,
      5000,
    );
    phase(`${NO_PXE_NODE.name}: ${failed.status!.errorType}: ${failed.status!.errorMessage}`);
    expect(failed.status!.errorType).toBe("inspection error");
    expect(failed.status!.errorMessage).toMatch(/timeout reached while inspecting/);
    // Ironic did power it on to boot from the network, and the appliance's DHCP never heard from it.
    expect(poweredOn).toBe(true);
    const dnsmasqLog = await readFile(servers.find((s) => s.name === "dnsmasq")!.log, "utf8");
    expect(dnsmasqLog).toMatch(/DHCP, IP range 172\.22\.0\.10 -- 172\.22\.0\.20/); // the log is the running server's (log-dhcp: it logs every request it hears)
    expect(dnsmasqLog + (await readFile(leases, "utf8").catch(() => ""))).not.toContain(NO_PXE_NODE.mac);
    await c.custom.deleteNamespacedCustomObject({ ...bmhApi, namespace: NAMESPACE, name: NO_PXE_NODE.name });
    await execa("virsh", ["-c", libvirt.uri, "destroy", NO_PXE_NODE.name], { reject: false });
  });

  it(
    "a host is inspected, refuses an image with a wrong checksum, then deploys the OS image; the node answers SSH with the BPA's key",
    { timeout: 3 * HOUR },
    async () => {
      await createHost(NODE, {
        bmcAddress: `redfish+http://127.0.0.1:${BMC_PORT}/redfish/v1/Systems/${NODE.uuid}`,
        bootMode: "legacy",
        // First a checksum that does not match: the deployment must fail and say so.
        image: { url: osImage.url, checksum: "0".repeat(64), checksumType: "sha256", format: "qcow2" },
      });
      const states = stateWatcher(NODE);
      // Inspected: Metal3 wrote the HardwareData (the host passes "available" on its way to provisioning, perhaps between two looks).
      await states.until(["available", "provisioning"], 2 * HOUR);
      await expectHardware(NODE);

      const failed = await until(
        "the wrong checksum's provisioning error",
        async () => {
          await states.note();
          const h = await host(NODE.name);
          return h.status?.errorType === "provisioning error" ? h : undefined;
        },
        2 * HOUR,
        5000,
      );
      phase(`wrong checksum: provisioning error: ${failed.status!.errorMessage}`);
      expect(failed.status!.errorMessage).toMatch(/checksum|[Cc]hecksum/);

      await c.custom.patchNamespacedCustomObject(
        {
          ...bmhApi,
          namespace: NAMESPACE,
          name: NODE.name,
          body: { spec: { image: { url: osImage.url, checksum: osImage.sha256, checksumType: "sha256", format: "qcow2" } } },
        },
        mergePatch,
      );
      phase("checksum corrected");
      const provisioned = await states.until(["provisioned"], 2 * HOUR, false);
      expect(provisioned.status!.errorType ?? "").toBe("");
      expect(provisioned.status!.poweredOn).toBe(true);

      const answer = await sshWithBpaKey(NODE, "hostname; lsblk -ndo NAME,SIZE /dev/vda; findmnt -no SOURCE /");
      expect(answer).toMatch(/vda/);
      expect(answer).toMatch(/\/dev\/vda\d/);
      await execa("virsh", ["-c", libvirt.uri, "destroy", NODE.name], { reject: false });
    },
  );

  it(
    "a UEFI host whose BMC offers virtual media boots Ironic's ISO from it (no network boot), is inspected and deployed; it boots its OS by UEFI",
    { timeout: 3 * HOUR },
    async () => {
      await createHost(VMEDIA_NODE, {
        bmcAddress: `redfish-virtualmedia+http://127.0.0.1:${BMC_PORT}/redfish/v1/Systems/${VMEDIA_NODE.uuid}`,
        bootMode: "UEFI",
        image: { url: osImage.url, checksum: osImage.sha256, checksumType: "sha256", format: "qcow2" },
      });
      const states = stateWatcher(VMEDIA_NODE);
      // While the agent runs, the VM has Ironic's ISO as a CD-ROM, put there by the BMC's InsertMedia.
      const cdroms = new Set<string>();
      const lookForCdrom = async () => {
        const xml = (await execa("virsh", ["-c", libvirt.uri, "dumpxml", VMEDIA_NODE.name], { reject: false })).stdout;
        for (const m of xml.matchAll(/<disk type='file' device='cdrom'>[\s\S]*?<source file='([^']+)'/g)) cdroms.add(m[1]!);
      };
      await states.until(["available", "provisioning"], 2 * HOUR, true, lookForCdrom);
      await expectHardware(VMEDIA_NODE);
      const provisioned = await states.until(["provisioned"], 2 * HOUR, true, lookForCdrom);
      expect(provisioned.status!.poweredOn).toBe(true);
      phase(`${VMEDIA_NODE.name}: virtual media seen attached: ${[...cdroms].join(", ") || "(none)"}`);
      expect(cdroms.size).toBeGreaterThan(0);
      // It never network-booted: no PXE or iPXE request from it reached the appliance's DHCP.
      const dnsmasqLog = await readFile(servers.find((s) => s.name === "dnsmasq")!.log, "utf8");
      expect(pxeRequestsFrom(dnsmasqLog, VMEDIA_NODE.mac)).toEqual([]);
      expect(pxeRequestsFrom(dnsmasqLog, NODE.mac).length).toBeGreaterThan(0); // the check can see one: node-0 network-booted

      const answer = await sshWithBpaKey(VMEDIA_NODE, "hostname; test -d /sys/firmware/efi && echo booted-uefi; findmnt -no SOURCE /");
      expect(answer).toMatch(/booted-uefi/);
      expect(answer).toMatch(/\/dev\/vda\d/);
    },
  );
});
