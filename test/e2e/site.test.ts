/**
 * `npm run e2e`: a whole site on emulated hardware (issue 14). The default image boots as
 * the bootstrap machine in QEMU with two NICs: QEMU's user network (restrict=on: SSH and
 * the API server forwarded to this host, no way out) and a tap on the provisioning
 * network, a bridge of this test's own network namespace (the npm script starts the run
 * under `unshare --net`) with nothing else on it but the compute node and its BMC. What
 * differs per site comes from a site disk (`icn-bootstrap site write --new`): the
 * provisioning network (interface enp0s9, 172.22.0.1/24, a DHCP range) and the test's SSH
 * key. The compute node is a libvirt VM with a blank disk behind sushy-tools' Redfish
 * emulator (test/helpers/bmc-emulator.ts) on the bridge's host address.
 *
 * The only input is `kubectl apply`, run on the appliance against its API server: a
 * namespace, the BMC's Secret, the sample Provisioning scaled to the node at hand, and a
 * BareMetalHost naming the appliance's OS image and the BPA's user-data. Then, each phase
 * printed with its time: the appliance's own Metal3 and Ironic inspect the node over the
 * provisioning network and write the OS image; the BPA assigns it and runs the real
 * kubespray in a Job on the appliance; the Provisioning ends Ready and its Secret's
 * kubeconfig shows the node Ready and runs a pod pulled through the appliance's registry;
 * then the BPA's addons Job installs the appliance's default addons (AddonsReady, NFD's labels).
 *
 * Options of scripts/e2e.sh, passed here in the environment: `--nodes 2` (ICN_E2E_NODES)
 * adds a worker; `--power-cut` (ICN_E2E_POWER_CUT) pulls the appliance's plug while the
 * kubespray Job runs and boots it again: the Provisioning must end Ready, or Failed with the
 * retry annotation named, which the test then sets.
 */
import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ANNOTATION_RETRY } from "../../bpa/api/constants.js";
import type { Provisioning } from "../../bpa/api/types.js";
import { makeClients, type Clients } from "../../bpa/runtime/kube.js";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir, runStages } from "../../builder/pipeline.js";
import { freePort } from "../../builder/registry/server.js";
import { readOsImage } from "../../builder/stages/os-image.js";
import { expectDefaultAddonsInstalled } from "../helpers/addons.js";
import { startBmc, type Bmc } from "../helpers/bmc-emulator.js";
import { REPO, runCli } from "../helpers/cli.js";
import { domainXml, startLibvirt, type Libvirt } from "../helpers/libvirt.js";
import { phaseLog } from "../helpers/phases.js";
import { waitFor } from "../helpers/operator-suite.js";
import { sshArgs } from "../helpers/ssh.js";

const HOUR = 60 * 60_000;
const BRIDGE = "prov0";
const APPLIANCE_TAP = "appl0";
/** The appliance's provisioning NIC: PCI slot 9, so the guest names it enp0s9. */
const APPLIANCE_NIC = { ifname: APPLIANCE_TAP, mac: "52:54:00:22:00:fe", pciSlot: 9 };
const APPLIANCE = "172.22.0.1";
/** The bridge's own address: the BMC emulator listens there, as a BMC network would be reachable. */
const BMC_HOST = "172.22.0.254";
const BMC_PORT = 8000;
const BMC_USER = "admin";
const BMC_PASSWORD = `bmc-${Math.random().toString(36).slice(2)}`;
const NAMESPACE = "site-a";
/** `npm run e2e -- --nodes 2` (ICN_E2E_NODES): a master and a worker; by default one node with both roles. */
const NODE_COUNT = Number(process.env.ICN_E2E_NODES ?? "1");
if (![1, 2].includes(NODE_COUNT)) throw new Error(`ICN_E2E_NODES=${process.env.ICN_E2E_NODES}: 1 or 2 compute nodes`);
const NODES = [
  { name: "node-0", uuid: randomUUID(), mac: "52:54:00:22:10:01", cpus: 2, memoryMiB: 4096, diskGiB: 20 },
  { name: "node-1", uuid: randomUUID(), mac: "52:54:00:22:10:02", cpus: 2, memoryMiB: 3072, diskGiB: 20 },
].slice(0, NODE_COUNT);
/**
 * `npm run e2e -- --power-cut` (ICN_E2E_POWER_CUT=1): the appliance loses power while the
 * kubespray Job runs (POWER_CUT_AFTER_S after its runner started) and boots again.
 */
const POWER_CUT = process.env.ICN_E2E_POWER_CUT === "1";
const POWER_CUT_AFTER_S = 300;
const PROVISIONING = "site-a-cluster";
const BOOT_TIMEOUT_S = 90 * 60;
const READY = /ICN-BOOTSTRAP-READY .* bpa=available metal3=available/;

const { phase, summary } = phaseLog("e2e");

let work: string;
let key: string;
let siteDisk: string;
let osImage: { path: string; sha256: string };
let libvirt: Libvirt | undefined;
let bmc: Bmc | undefined;
let appliance: BootResult | undefined;
let applianceDisk: string;
let sshPort: number;
let c: Clients;

function ssh(command: string, input?: string) {
  return execa("ssh", sshArgs(key, { port: sshPort }, command), { input, all: true, reject: false });
}

/** `kubectl apply` on the appliance, against its own API server: the administrator's only input. */
async function kubectlApply(manifest: string): Promise<string> {
  const r = await ssh("kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f -", manifest);
  expect(r.exitCode, r.all).toBe(0);
  return String(r.all);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-e2e-site-"));
  await execa("ip", ["link", "set", "lo", "up"]);
  await execa("ip", ["link", "add", BRIDGE, "type", "bridge"]);
  await execa("ip", ["addr", "add", `${BMC_HOST}/24`, "dev", BRIDGE]);
  await execa("ip", ["link", "set", BRIDGE, "up"]);
  await execa("ip", ["tuntap", "add", "dev", APPLIANCE_TAP, "mode", "tap"]);
  await execa("ip", ["link", "set", APPLIANCE_TAP, "master", BRIDGE, "up"]);

  // The default image as `npm run e2e` built it; the OS image's checksum for the BareMetalHost.
  const definition = await loadDefinition(DEFAULT_DEFINITION);
  const [computeNode] = (
    await runStages({
      definition: { ...definition, osImages: ["compute-node"] },
      lock: await loadLock(DEFAULT_LOCK),
      stagesDir: stagesDir(),
      sections: ["os-images"],
    })
  ).osImages;
  const os = await readOsImage(computeNode!.image!);
  osImage = { path: os.path, sha256: os.sha256 };

  key = join(work, "id_ed25519");
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
  const site = join(work, "site");
  await mkdir(join(site, "manifests"), { recursive: true });
  await writeFile(
    join(site, "site.yaml"),
    [
      "version: 1",
      "provisioning:",
      `  interface: enp0s${APPLIANCE_NIC.pciSlot}`,
      `  address: ${APPLIANCE}/24`,
      "  dhcpRange: 172.22.0.10-172.22.0.20",
      "access:",
      `  sshAuthorizedKeys: ["${(await readFile(`${key}.pub`, "utf8")).trim()}"]`,
      "",
    ].join("\n"),
  );
  siteDisk = join(work, "site.img");
  const written = await runCli(["site", "write", site, "--new", siteDisk]);
  expect(written.exitCode, written.all).toBe(0);

  libvirt = await startLibvirt(work);
  bmc = await startBmc({ work, libvirtUri: libvirt.uri, port: BMC_PORT, username: BMC_USER, password: BMC_PASSWORD, listenIp: BMC_HOST });
  for (const node of NODES) {
    const disk = join(work, `${node.name}.qcow2`);
    await execa("qemu-img", ["create", "-q", "-f", "qcow2", disk, `${node.diskGiB}G`]);
    const xml = join(work, `${node.name}.xml`);
    await writeFile(xml, domainXml({ ...node, disk, bridge: BRIDGE, console: join(work, `${node.name}.console.log`), type: "qemu" }));
    await execa("virsh", ["-c", libvirt.uri, "define", xml]);
  }
  applianceDisk = join(work, "appliance.qcow2");
  phase(
    `compute node(s) ${NODES.map((n) => n.name).join(", ")} (off) behind their Redfish BMC at ${BMC_HOST}:${BMC_PORT}; site disk written${POWER_CUT ? "; a power cut will follow" : ""}`,
  );
}, 2 * HOUR);

afterAll(async () => {
  console.log(summary());
  await appliance?.stop?.();
  await libvirt?.stop();
  await bmc?.stop();
  await execa("ip", ["link", "del", BRIDGE], { reject: false });
  if (work && process.env.ICN_KEEP_TEST_TMP !== "1") await rm(work, { recursive: true, force: true });
});

/**
 * Boots the appliance from its disk (the first time a fresh overlay on the built image; again
 * after a power cut, the same disk) and connects to its API server.
 */
async function bootAppliance(): Promise<void> {
  sshPort = await freePort();
  const apiPort = await freePort();
  appliance = await bootImage({
    image: join(REPO, "out", "icn-bootstrap.qcow2"),
    firmware: "bios",
    timeoutSeconds: BOOT_TIMEOUT_S,
    memoryMiB: 6144,
    cpus: 2,
    disk: applianceDisk,
    keepRunning: true,
    tcgMultiThread: true,
    hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`, `tcp:127.0.0.1:${apiPort}-:6443`],
    extraTaps: [APPLIANCE_NIC],
    extraDisks: [siteDisk],
    readyPattern: READY,
  });
  expect(appliance.ready, appliance.failure ?? appliance.lastLines.join("\n")).toBe(true);
  const admin = (await ssh("cat /etc/kubernetes/admin.conf")).stdout.replace(/server: https:\/\/[^\s]+/, `server: https://127.0.0.1:${apiPort}`);
  const kc = new KubeConfig();
  kc.loadFromString(admin);
  c = makeClients(kc);
}

const getProvisioning = async () =>
  (await c.custom.getNamespacedCustomObject({
    group: "bpa.akraino.org",
    version: "v1alpha1",
    namespace: NAMESPACE,
    plural: "provisionings",
    name: PROVISIONING,
  })) as Provisioning;
const describeStatus = (p: Provisioning) => `${p.status?.phase ?? ""} ${p.status?.conditions?.map((x) => `${x.type}=${x.status}/${x.reason}`).join(",") ?? ""}`;

const KUBECTL = `kubectl --kubeconfig /etc/kubernetes/admin.conf -n ${NAMESPACE}`;
const RUNNER_PODS = `${KUBECTL} get pods -l bpa.akraino.org/component=install --sort-by=.metadata.creationTimestamp -o name`;
/** Every install runner's log, oldest first (a retry makes a second one), each under its pod's name. */
const RUNNER_LOGS = `for pod in $(${RUNNER_PODS}); do echo "==> $pod <=="; ${KUBECTL} logs "$pod"; done`;
/** The newest runner's log: the one that is running. */
const NEWEST_RUNNER_LOG = `${KUBECTL} logs "$(${RUNNER_PODS} | tail -n 1)"`;
/** Where the install runners' logs are kept after the run (Ansible's profile of every task). */
const RUNNER_LOG_FILE = join(REPO, "out", "e2e-site-runner.log");

/**
 * Waits for the Provisioning to end Ready or Failed, printing each change of its status and,
 * every few minutes, the play and task the runner is at; then keeps the runner's whole log in
 * out/ and prints the slowest tasks (kubespray's ansible.cfg enables Ansible's profile_tasks).
 */
async function provisioningSettled(what: string): Promise<Provisioning> {
  let last = "";
  let lastTask = "";
  let nextLook = 0;
  const settled = await waitFor(
    what,
    async () => {
      const current = await getProvisioning();
      const now = describeStatus(current);
      if (now !== last) phase(`Provisioning: ${(last = now)}`);
      if (Date.now() >= nextLook) {
        nextLook = Date.now() + 3 * 60_000;
        const r = await ssh(`${NEWEST_RUNNER_LOG} | grep -E '^(PLAY|TASK) \\[' | tail -1`);
        const task = r.stdout.trim();
        if (task && task !== lastTask) phase(`runner at: ${(lastTask = task)}`);
      }
      return current.status?.phase === "Ready" || current.status?.phase === "Failed" ? current : undefined;
    },
    4 * HOUR,
    15_000,
  );
  const logs = await ssh(RUNNER_LOGS);
  await mkdir(join(REPO, "out"), { recursive: true });
  await writeFile(RUNNER_LOG_FILE, logs.stdout);
  const at = logs.stdout.lastIndexOf("PLAY RECAP");
  const end = at >= 0 ? logs.stdout.slice(at).split("\n").slice(0, 40).join("\n") : "";
  phase(`runner's log kept in ${RUNNER_LOG_FILE}${end ? `; its end:\n${end}` : ""}`);
  return settled;
}

describe("a whole site: power-on to application cluster, with no user action but kubectl apply", () => {
  it("the appliance boots with the site's provisioning network and Metal3 ready", { timeout: (BOOT_TIMEOUT_S + 600) * 1000 }, async () => {
    await bootAppliance();
    phase(`appliance ready after ${appliance!.seconds.toFixed(0)} s (${appliance!.accel})`);
    // The provisioning network as the site disk gave it: the address on enp0s9, DHCP served there.
    expect((await ssh(`ip -4 -o addr show enp0s${APPLIANCE_NIC.pciSlot}`)).stdout).toContain(`${APPLIANCE}/24`);
    const dnsmasq = await c.core.listNamespacedPod({ namespace: "baremetal-operator-system", labelSelector: "app.kubernetes.io/name=ironic-dnsmasq" });
    expect(dnsmasq.items.map((p) => p.status?.phase)).toEqual(["Running"]);
  });

  it(
    "kubectl apply of BareMetalHosts and a Provisioning: the nodes are inspected and provisioned by the appliance's Metal3",
    { timeout: 3 * HOUR },
    async () => {
      await kubectlApply(
        [
          `apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ${NAMESPACE}`,
          // One BMC, one account for every node (sushy-tools serves them all).
          `apiVersion: v1\nkind: Secret\nmetadata:\n  name: bmc\n  namespace: ${NAMESPACE}\nstringData:\n  username: ${BMC_USER}\n  password: ${BMC_PASSWORD}`,
          // The seed's sample, scaled to the nodes at hand: one node is control plane and
          // worker; with two, the second is a worker.
          `apiVersion: bpa.akraino.org/v1alpha1\nkind: Provisioning\nmetadata:\n  name: ${PROVISIONING}\n  namespace: ${NAMESPACE}\nspec:\n  master:\n    - cpu: 2\n      memory: 2Gi` +
            (NODE_COUNT > 1 ? "\n  worker:\n    - cpu: 2\n      memory: 2Gi" : ""),
        ].join("\n---\n"),
      );
      await kubectlApply(
        NODES.map((node) =>
          [
            "apiVersion: metal3.io/v1alpha1",
            "kind: BareMetalHost",
            "metadata:",
            `  name: ${node.name}`,
            `  namespace: ${NAMESPACE}`,
            "spec:",
            "  online: true",
            `  bootMACAddress: ${node.mac}`,
            "  bootMode: legacy",
            "  automatedCleaningMode: disabled",
            "  rootDeviceHints: { deviceName: /dev/vda }",
            `  bmc: { address: "redfish+http://${BMC_HOST}:${BMC_PORT}/redfish/v1/Systems/${node.uuid}", credentialsName: bmc }`,
            "  userData: { name: bpa-ssh-key-user-data }",
            `  image: { url: "http://${APPLIANCE}:8080/${osImage.path}", checksum: ${osImage.sha256}, checksumType: sha256, format: qcow2 }`,
            "",
          ].join("\n"),
        ).join("---\n"),
      );
      phase(`applied: namespace, BMC Secret, Provisioning, ${NODES.length} BareMetalHost(s)`);
      const last = new Map<string, string>();
      const states = await waitFor(
        `${NODES.map((n) => n.name).join(" and ")} provisioned`,
        async () => {
          const now: string[] = [];
          for (const node of NODES) {
            const h = (await c.custom.getNamespacedCustomObject({
              group: "metal3.io",
              version: "v1alpha1",
              namespace: NAMESPACE,
              plural: "baremetalhosts",
              name: node.name,
            })) as { status?: { provisioning?: { state?: string }; errorType?: string; errorMessage?: string } };
            const state = h.status?.provisioning?.state ?? "";
            if (state !== (last.get(node.name) ?? "-")) phase(`${node.name}: ${state || "(new)"}`);
            last.set(node.name, state);
            if (h.status?.errorType)
              throw new Error(
                `${node.name}: ${h.status.errorType}: ${h.status.errorMessage}\nconsole:\n${(await readFile(join(work, `${node.name}.console.log`), "utf8").catch(() => "")).slice(-3000)}`,
              );
            now.push(state);
          }
          return now.every((state) => state === "provisioned") ? now : undefined;
        },
        2 * HOUR,
        10_000,
      );
      expect(states).toEqual(NODES.map(() => "provisioned"));
    },
  );

  it.runIf(POWER_CUT)(
    "a power cut of the appliance while kubespray runs: booted again, the Provisioning ends Ready or Failed with a retry path, never stuck",
    { timeout: 4 * HOUR },
    async () => {
      const runner = await waitFor(
        "the install Job's runner running",
        async () =>
          (await c.core.listNamespacedPod({ namespace: NAMESPACE, labelSelector: "bpa.akraino.org/component=install" })).items.find(
            (pod) => pod.status?.phase === "Running",
          ),
        2 * HOUR,
        10_000,
      );
      phase(`install runner ${runner.metadata!.name} running; the power goes in ${POWER_CUT_AFTER_S} s`);
      await new Promise((resolve) => setTimeout(resolve, POWER_CUT_AFTER_S * 1000));
      const log = await ssh(`kubectl --kubeconfig /etc/kubernetes/admin.conf -n ${NAMESPACE} logs ${runner.metadata!.name} --tail=3`);
      // QEMU ends on SIGTERM without the guest's shutdown: the machine simply stops, as when the plug is pulled.
      await appliance!.stop!();
      phase(`power cut; the runner's last lines:\n${log.stdout}`);
      await bootAppliance();
      phase(`appliance ready again after ${appliance!.seconds.toFixed(0)} s`);
      const p = await provisioningSettled("the Provisioning Ready or Failed after the power cut");
      if (p.status?.phase === "Failed") {
        // Failed must say why and how to go on: the retry annotation.
        const failed = p.status.conditions?.find((x) => x.status === "False" && /retry/i.test(x.message ?? ""));
        expect(failed?.message, JSON.stringify(p.status.conditions)).toContain(ANNOTATION_RETRY);
        phase(`Failed, as it should say: ${failed!.message}`);
        const retried = await ssh(
          `kubectl --kubeconfig /etc/kubernetes/admin.conf -n ${NAMESPACE} annotate provisioning ${PROVISIONING} ${ANNOTATION_RETRY}=after-power-cut --overwrite`,
        );
        expect(retried.exitCode, retried.all).toBe(0);
        await waitFor(
          "the BPA to take up the retry",
          async () => ((await getProvisioning()).status?.phase !== "Failed" ? true : undefined),
          10 * 60_000,
          5_000,
        );
        phase("retry annotation set: the BPA runs the install again");
      }
    },
  );

  it("the BPA installs the application cluster with the real kubespray: the Provisioning is Ready", { timeout: 4 * HOUR }, async () => {
    const p = await provisioningSettled("the Provisioning Ready or Failed");
    expect(p.status?.phase, JSON.stringify(p.status?.conditions)).toBe("Ready");
  });

  it(
    "through the kubeconfig in the Provisioning's Secret: the node is Ready and a pod pulled through the appliance's registry runs",
    { timeout: HOUR },
    async () => {
      // As an administrator would, on the appliance: the kubeconfig the BPA keeps, then kubectl.
      const p = await getProvisioning();
      const secret = p.status?.kubeconfigSecret;
      expect(secret).toBeTruthy();
      const saved = await ssh(
        `umask 077; kubectl --kubeconfig /etc/kubernetes/admin.conf -n ${NAMESPACE} get secret ${secret} -o jsonpath='{.data.kubeconfig}' | base64 -d > /root/site-a.kubeconfig && grep -o 'server: .*' /root/site-a.kubeconfig`,
      );
      expect(saved.exitCode, saved.all).toBe(0);
      expect(saved.stdout).toMatch(/server: https:\/\/172\.22\.0\.\d+:6443/);
      const kubectl = (args: string) => ssh(`kubectl --kubeconfig /root/site-a.kubeconfig --request-timeout=60s ${args}`);
      const nodes = await waitFor(
        `${NODE_COUNT} node(s) Ready`,
        async () => {
          const r = await kubectl("get nodes -o wide --no-headers");
          const lines = r.stdout.split("\n").filter(Boolean);
          return lines.length === NODE_COUNT && lines.every((line) => /^\S+\s+Ready\s/.test(line)) ? r.stdout : undefined;
        },
        15 * 60_000,
        5_000,
      );
      console.log(`e2e kubectl get nodes:\n${nodes}`);
      expect(nodes).toMatch(/^\S+\s+Ready\s+control-plane/m);
      phase(`application cluster: kubectl get nodes: ${NODE_COUNT} Ready`);
      // The pause image as upstream names it: containerd's mirror sends registry.k8s.io to the
      // appliance's registry, the only place the node can reach.
      const pause = "registry.k8s.io/pause:3.10.1";
      const run = await kubectl(`run probe --image=${pause} --restart=Never`);
      expect(run.exitCode, run.all).toBe(0);
      const running = await waitFor(
        "the probe pod Running",
        async () => {
          const r = await kubectl("get pod probe -o jsonpath='{.status.phase} {.status.containerStatuses[0].imageID}'");
          return r.stdout.startsWith("Running") ? r.stdout : undefined;
        },
        15 * 60_000,
        5_000,
      );
      expect(running).toMatch(/^Running registry\.k8s\.io\/pause@sha256:[0-9a-f]{64}$/);
      // Its digest is the one the appliance's registry serves.
      const served = await ssh(
        `curl -sfI --cacert /etc/icn-bootstrap/pki/registry-ca.crt -H 'Accept: application/vnd.oci.image.index.v1+json' -H 'Accept: application/vnd.docker.distribution.manifest.list.v2+json' -H 'Accept: application/vnd.oci.image.manifest.v1+json' -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' https://bootstrap.icn:5000/v2/pause/manifests/3.10.1 | tr -d '\\r' | sed -n 's/^docker-content-digest: //Ip'`,
      );
      expect(served.stdout.trim()).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect(running).toContain(served.stdout.trim());
      phase("probe pod Running from the appliance's registry");
    },
  );

  it("the BPA installs the appliance's addons into the cluster from its registry: AddonsReady, NFD's labels on the node", { timeout: HOUR }, async () => {
    await expectDefaultAddonsInstalled(getProvisioning, { timeoutMs: 45 * 60_000, intervalMs: 15_000 });
    phase("addons installed: AddonsReady");
    const kubectl = (args: string) => ssh(`kubectl --kubeconfig /root/site-a.kubeconfig --request-timeout=60s ${args}`);
    const labels = await waitFor(
      "NFD's node labels",
      async () => {
        const r = await kubectl("get nodes -o jsonpath='{.items[0].metadata.labels}'");
        return /feature\.node\.kubernetes\.io\/cpu-/.test(r.stdout) ? r.stdout : undefined;
      },
      15 * 60_000,
      15_000,
    );
    expect(labels).toContain('"feature.node.kubernetes.io/cpu-cpuid.HYPERVISOR":"true"');
    console.log(`e2e kubectl get pods -A:\n${(await kubectl("get pods -A -o wide")).stdout}`);
    phase("NFD's labels on the node");
  });
});
