/**
 * `npm run e2e:kubespray`: the real kubespray installs an application cluster on a compute
 * node that can reach nothing but the appliance's registry and file server; then, day 2, a
 * worker entry added to the Provisioning makes the BPA join a second node with the real
 * scale.yml, and a newer spec.kubernetesVersion makes it upgrade both with the real
 * upgrade-cluster.yml. The appliance serves two Kubernetes versions for that: the lock's
 * and the older one the lock also pins (kubernetes-v1.35.3, registry-seed/kubernetes-v1.35.3.yaml).
 *
 * Everything runs in a network namespace of its own (the npm script starts the run under
 * `unshare --net`): its loopback, and a bridge with one tap device per compute node VM
 * (10.124.0.1 here, 10.124.0.2 and .3 the nodes). Nothing routes anywhere else: a new
 * namespace does not forward.
 *
 * Real: the build's OS image (the node's disk, with the BPA's cloud-init user-data on a
 * NoCloud seed and a static address), the build's seeded registry (docker-registry behind
 * TLS of a site CA made here) and file server tree (nginx), a kube-apiserver, the BPA
 * operator (in this process) making the SSH key, the inventory, the kubespray variables and
 * the install Job for a Provisioning and a BareMetalHost, the runner image (its root
 * filesystem, entrypoint and environment) running the real kubespray v2.31.0 cluster.yml,
 * the kubeconfig handed back into the Provisioning's Secret, then `kubectl get nodes` and a
 * pod pulled through the appliance's registry in the new cluster; then the BPA's addons Job
 * (the runner's Helm installing the appliance's catalog, manifests/bpa/addons.yaml, from the
 * seeded charts): NFD's labels on the node, a pod with a second interface through Multus (a
 * macvlan NetworkAttachmentDefinition), the SR-IOV device plugin advertising the node's spare
 * NIC as a resource (the Provisioning's values select it: QEMU 7.2 emulates no SR-IOV
 * device, so no virtual function exists here) and a pod allocated it, the SR-IOV CNI plugin on
 * the node, the QAT device plugin running with no device, every image from the build; a
 * site's own chart uploaded through the REST API (`icn-bootstrap upload --kind chart`),
 * named in spec.addons and installed by the next addons Job, then its next version uploaded
 * and rolled out; then the BPA's scale Job
 * (scale.yml --limit to the new node, after every host's facts) and the second node Ready,
 * running a pod, with status.cluster and status.nodes showing both; then the BPA's upgrade
 * Job (upgrade-cluster.yml with the newer kube_version) and both nodes on the new version.
 *
 * STAND-IN: no kubelet runs the Job; test/helpers/job-standin.ts runs its container as a
 * kubelet would and writes the Job's status as the Job controller would. The
 * BareMetalHost's status is written by the test, as Metal3 would once the node is
 * provisioned (Metal3 is issue 9).
 *
 * Under TCG this takes long (docs/testing.md: e2e); the phases print their times.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig, type V1Job } from "@kubernetes/client-node";
import { execa, type ResultPromise } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig, type BpaConfig } from "../../bpa/config/config.js";
import { makeClients, mergePatch, type Clients } from "../../bpa/runtime/kube.js";
import { makeLogger } from "../../bpa/runtime/log.js";
import { sshObjectNames } from "../../bpa/jobs/objects.js";
import { Operator } from "../../bpa/operator.js";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { DEFAULT_DEFINITION, loadDefinition, withExtraKubernetes } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir, runStages, type StagesBuilt } from "../../builder/pipeline.js";
import { startRegistry, type RegistryServer } from "../../builder/registry/server.js";
import { FILES_ROOT } from "../../builder/stages/files.js";
import { readOsImage } from "../../builder/stages/os-image.js";
import { IMAGES_JSON, type BuiltImage } from "../../builder/stages/images.js";
import { REGISTRY_STORAGE } from "../../builder/stages/registry.js";
import { artifactPaths } from "../../builder/sources/index.js";
import { MANIFESTS_TARGET } from "../../builder/stages/overlays.js";
import { makeTestCA } from "../helpers/fixtures/bpa/registry-ca.js";
import { bmh } from "../helpers/fixtures/bpa/hosts.js";
import { startKubeTestServer, type KubeTestServer } from "../helpers/kube-apiserver.js";
import { expectDefaultAddonsInstalled } from "../helpers/addons.js";
import { REPO, runCli } from "../helpers/cli.js";
import { phaseLog } from "../helpers/phases.js";
import { readImageConfig, runJobAsKubelet, type ImageConfig } from "../helpers/job-standin.js";
import { unpackImage } from "../helpers/oci-rootfs.js";
import { applyCrds, createHost, createProvisioning, getProvisioning, listInstallJobs, waitFor } from "../helpers/operator-suite.js";
import { createRegistryAccess, startApiFixture, tokenFor } from "../helpers/rest-suite.js";
import { sshTry } from "../helpers/ssh.js";

const BRIDGE = "icnbr0";
const HOST_IP = "10.124.0.1";
interface NodeSpec {
  name: string;
  ip: string;
  mac: string;
  tap: string;
  memoryMiB: number;
  cpus: number;
}
/** The first node: control plane and worker (kubespray's single-node layout). */
const NODE_A: NodeSpec = {
  name: "compute-a",
  ip: "10.124.0.2",
  mac: "52:54:00:12:40:02",
  tap: "icnks0",
  memoryMiB: Number(process.env.ICN_E2E_NODE_MEMORY_MIB ?? 6144),
  cpus: 2,
};
/**
 * The node added on day 2, as a worker: one virtual CPU (a worker needs no more), so that the
 * two emulated VMs leave the first node's control plane some of the host's two cores. With
 * two each, its API server missed kubeadm's 10 s on scale.yml's upload-certs.
 */
const NODE_B: NodeSpec = {
  name: "compute-b",
  ip: "10.124.0.3",
  mac: "52:54:00:12:40:03",
  tap: "icnks1",
  memoryMiB: Number(process.env.ICN_E2E_WORKER_MEMORY_MIB ?? 3072),
  cpus: 1,
};
const NODES = [NODE_A, NODE_B];
/**
 * `npm run e2e:kubespray:upgrade` (ICN_E2E_SCALE=0) leaves the second node out: the one node
 * is installed at the older version and upgraded. Two emulated VMs on two cores starve each
 * other's control plane; one makes the upgrade half cheaper and steadier.
 */
const SCALE = process.env.ICN_E2E_SCALE !== "0";
const CLUSTER_NODES = SCALE ? NODES : [NODE_A];
const NODE_NAME = NODE_A.name;
/** The compute VMs' spare NIC: PCI 0000:00:10.0, which the SR-IOV device plugin's e2e resource selects. */
const SPARE_NIC_SLOT = 0x10;
const SPARE_NIC_PCI = `0000:00:${SPARE_NIC_SLOT.toString(16)}.0`;
const SPARE_NIC_RESOURCE = "e2e_spare_nic";
/** A site's own chart, uploaded through the REST API as `icn-bootstrap upload --kind chart` does. */
const SITE_CHART = "site-app";
const SITE_CHART_REPOSITORY = `charts/${SITE_CHART}`;
const NODE_IP = NODE_A.ip;
const NODE_MAC = NODE_A.mac;
const RUNNER = "bootstrap.icn:5000/icn/kubespray-runner:v2.31.0";
const REGISTRY_HOST = `${HOST_IP}:5000`;
const FILES_REPO = `http://${HOST_IP}:8080/kubespray`;
const NAMESPACE = "site";
const PROVISIONING = "cluster-a";
const CLOUD_INIT_DONE = /Cloud-init v\. \S+ finished at .*Datasource (\S+)/;
const HOUR = 3600_000;

const { phase, summary: phaseSummary } = phaseLog("e2e:kubespray");

let work: string;
let content: StagesBuilt;
let kube: KubeTestServer;
let kc: KubeConfig;
let c: Clients;
let operator: Operator | undefined;
let registry: RegistryServer | undefined;
/** Where the REST API's uploads go: the build's registry storage is the stage cache's and stays read-only here. */
let uploadsRegistry: RegistryServer | undefined;
let nginx: ResultPromise | undefined;
type NodeVm = BootResult & { ssh: (command: string) => Promise<{ ok: boolean; output: string }> };
const vms = new Map<string, NodeVm>();
let osImage: string;
let runnerRoot: string;
let runnerConfig: ImageConfig;
let builtImages: BuiltImage[];
/** The version the cluster is installed at (the older served one) and the one it is upgraded to (the lock's). */
let kubernetesVersion: string;
let upgradeVersion: string;
let pinsManifest: { metadata: { name: string; namespace: string }; data: Record<string, string> };
const siteCA = makeTestCA("e2e site CA");

async function sh(command: string, args: string[]) {
  return execa(command, args, { all: true });
}

/** The run must be in a network namespace of its own: only lo, down or up. */
async function requireOwnNetwork(): Promise<void> {
  const links = (await sh("ip", ["-o", "link", "show"])).stdout.split("\n").map((l) => l.split(":")[1]!.trim().split("@")[0]);
  const ours = new Set(["lo", BRIDGE, ...NODES.map((n) => n.tap)]);
  if (links.some((l) => !ours.has(l!))) {
    throw new Error(`this run must be in a network namespace of its own (found links ${links.join(", ")}): start it with 'npm run e2e:kubespray'`);
  }
  await sh("ip", ["link", "set", "lo", "up"]);
  for (const link of [...NODES.map((n) => n.tap), BRIDGE]) await execa("ip", ["link", "del", link], { reject: false });
  await sh("ip", ["link", "add", BRIDGE, "type", "bridge"]);
  await sh("ip", ["addr", "add", `${HOST_IP}/24`, "dev", BRIDGE]);
  await sh("ip", ["link", "set", BRIDGE, "up"]);
  for (const node of NODES) {
    await sh("ip", ["tuntap", "add", "dev", node.tap, "mode", "tap"]);
    await sh("ip", ["link", "set", node.tap, "master", BRIDGE]);
    await sh("ip", ["link", "set", node.tap, "up"]);
  }
}

/** The appliance's file server (nginx on :8080) and its registry behind TLS (:5000), on the node's network only. */
async function startApplianceServices(filesRoot: string, storage: string): Promise<void> {
  registry = await startRegistry(storage, { host: "127.0.0.1", readOnly: true });
  uploadsRegistry = await startRegistry(join(work, "uploads-registry"), { host: "127.0.0.1" });
  const dir = join(work, "nginx");
  await mkdir(join(dir, "logs"), { recursive: true });
  await writeFile(join(dir, "ca.crt"), siteCA.pem);
  await writeFile(join(dir, "ca.key"), siteCA.keyPem, { mode: 0o600 });
  await sh("openssl", [
    "req",
    "-new",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    join(dir, "tls.key"),
    "-out",
    join(dir, "tls.csr"),
    "-subj",
    "/CN=bootstrap.icn",
    "-addext",
    `subjectAltName=DNS:bootstrap.icn,IP:${HOST_IP}`,
  ]);
  await sh("openssl", [
    "x509",
    "-req",
    "-in",
    join(dir, "tls.csr"),
    "-CA",
    join(dir, "ca.crt"),
    "-CAkey",
    join(dir, "ca.key"),
    "-CAcreateserial",
    "-days",
    "2",
    "-copy_extensions",
    "copy",
    "-out",
    join(dir, "tls.crt"),
  ]);
  const temp = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map((t) => `${t}_temp_path ${dir}/${t};`).join(" ");
  await writeFile(
    join(dir, "nginx.conf"),
    [
      "daemon off;",
      "user root;",
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/logs/error.log;`,
      "events {}",
      "http {",
      `  access_log ${dir}/logs/access.log;`,
      `  ${temp}`,
      `  server { listen ${HOST_IP}:8080; root ${filesRoot}; sendfile on; location / { try_files $uri =404; } }`,
      `  server { listen ${REGISTRY_HOST} ssl; ssl_certificate ${dir}/tls.crt; ssl_certificate_key ${dir}/tls.key; client_max_body_size 0;`,
      `    location /v2/ { proxy_pass http://${registry.address}; proxy_set_header Host $http_host; proxy_set_header X-Forwarded-Proto https; proxy_buffering off; }`,
      // One registry on the appliance; here a site's uploads (charts/site-*) land in a second one behind the same front.
      `    location /v2/${SITE_CHART_REPOSITORY}/ { proxy_pass http://${uploadsRegistry.address}; proxy_set_header Host $http_host; proxy_set_header X-Forwarded-Proto https; proxy_buffering off; } }`,
      "}",
      "",
    ].join("\n"),
  );
  nginx = execa("nginx", ["-p", dir, "-c", join(dir, "nginx.conf")], { reject: false, all: true });
  await waitFor("the file server", async () => (await fetch(`${FILES_REPO}/`, { method: "HEAD" }).catch(() => undefined))?.status === 404, 10_000, 100);
}

/** The BPA's configuration as the appliance ships it, with this network's addresses. */
async function shippedConfig(): Promise<BpaConfig> {
  const configMap = yaml.load(await readFile(join(REPO, "manifests/bpa/config.yaml"), "utf8")) as { data: Record<string, string> };
  const shipped = yaml.load(configMap.data["config.yaml"]!) as Record<string, unknown>;
  // The shipped extraVars carry the room an emulated control plane needs (kubeadm patches,
  // leader-election leases): this run tests them as the appliance ships them.
  return parseConfig(
    {
      ...shipped,
      runnerImage: RUNNER,
      registryHost: REGISTRY_HOST,
      filesRepo: FILES_REPO,
      namespace: "bpa-system",
      watchNamespace: NAMESPACE,
      leaderElection: { enabled: false },
      extraVars: shipped.extraVars as Record<string, unknown>,
    },
    "manifests/bpa/config.yaml (e2e addresses)",
  );
}

/**
 * A NoCloud seed: the BPA's user-data, the node's name and its static address on the tap
 * network, with a name server as a site's network would name one (nothing answers there:
 * the site is offline; CoreDNS needs an upstream that is not itself).
 */
async function noCloudSeed(node: NodeSpec, userData: string): Promise<string> {
  const dir = join(work, `seed-${node.name}`);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "user-data"), userData);
  await writeFile(join(dir, "meta-data"), `instance-id: ${node.name}\nlocal-hostname: ${node.name}\n`);
  const network = {
    version: 2,
    ethernets: {
      nic0: {
        match: { macaddress: node.mac },
        addresses: [`${node.ip}/24`],
        routes: [{ to: "0.0.0.0/0", via: HOST_IP }],
        nameservers: { addresses: [HOST_IP] },
      },
    },
  };
  await writeFile(join(dir, "network-config"), yaml.dump(network));
  const seed = join(work, `seed-${node.name}.img`);
  await sh("mkfs.vfat", ["-n", "CIDATA", "-C", seed, "2048"]);
  await sh("mcopy", ["-i", seed, join(dir, "user-data"), join(dir, "meta-data"), join(dir, "network-config"), "::/"]);
  return seed;
}

async function bootNode(node: NodeSpec, userData: string, privateKey: string): Promise<NodeVm> {
  const keyFile = join(work, "bpa-key");
  await writeFile(keyFile, privateKey, { mode: 0o600 });
  const booted = await bootImage({
    image: osImage,
    firmware: "bios",
    timeoutSeconds: 8 * 3600,
    memoryMiB: node.memoryMiB,
    cpus: node.cpus,
    diskSize: "40G",
    tcgMultiThread: true,
    tap: { ifname: node.tap, mac: node.mac },
    // A spare NIC (no address, no route) for the SR-IOV device plugin to find and advertise.
    extraNics: [{ pciSlot: SPARE_NIC_SLOT }],
    extraDisks: [await noCloudSeed(node, userData)],
    keepRunning: true,
    readyPattern: CLOUD_INIT_DONE,
    failurePattern: /Kernel panic.*|Found ordering cycle.*/,
  });
  const ssh = (command: string) => sshTry(keyFile, { host: node.ip }, command);
  const vm = { ...booted, ssh };
  vms.set(node.name, vm);
  return vm;
}

/** The BPA's user-data and SSH key of the namespace (what Metal3 would give a node it provisions). */
async function bpaUserDataAndKey(): Promise<{ userData: string; privateKey: string }> {
  const objects = sshObjectNames(await shippedConfig());
  const userData = await waitFor(
    "the BPA's user-data Secret",
    async () => (await c.core.readNamespacedSecret({ namespace: NAMESPACE, name: objects.userData })).data?.userData,
    60_000,
    500,
  );
  const key = await c.core.readNamespacedSecret({ namespace: NAMESPACE, name: objects.privateKey });
  return { userData: Buffer.from(userData, "base64").toString(), privateKey: Buffer.from(key.data!["ssh-privatekey"]!, "base64").toString() };
}

/** The manifest digests of every image a node's containerd holds. */
async function imageDigestsOn(node: string): Promise<Set<string | undefined>> {
  const pulled = await vms.get(node)!.ssh("crictl images --digests -o json");
  return new Set((JSON.parse(pulled.output).images as { repoDigests?: string[] }[]).flatMap((i) => (i.repoDigests ?? []).map((d) => d.split("@")[1])));
}

/** Runs a BPA Job's container under the kubelet stand-in, printing each play with its time; fails with the runner's message. */
/** A merge patch of the Provisioning's spec, as `kubectl patch --type merge` would send it. */
async function patchProvisioningSpec(spec: Record<string, unknown>): Promise<void> {
  await c.custom.patchNamespacedCustomObject(
    { group: "bpa.akraino.org", version: "v1alpha1", namespace: NAMESPACE, plural: "provisionings", name: PROVISIONING, body: { spec } },
    mergePatch,
  );
}

async function runJob(job: V1Job, label: string): Promise<string[]> {
  const output: string[] = [];
  let lastPlay = "";
  const run = await runJobAsKubelet({
    c,
    job,
    rootfs: runnerRoot,
    image: runnerConfig,
    apiServer: new URL(kube.server),
    apiServerCa: Buffer.from(kc.getCurrentCluster()!.caData!, "base64").toString(),
    work,
    extraEnv: { ANSIBLE_CALLBACKS_ENABLED: "ansible.posix.profile_roles,ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT: "30" },
    onLine: (line) => {
      output.push(line);
      const play = /^PLAY \[(.+)\] \*+/.exec(line);
      if (play && play[1] !== lastPlay) phase(`${label} play: ${(lastPlay = play[1]!)}`);
      if (/^(fatal|failed):|^bpa-runner:/.test(line)) console.log(`e2e:kubespray ${line}`);
    },
  });
  // Kept after the run, beside the build's outputs (the run's scratch directory is removed).
  await mkdir(join(REPO, "out"), { recursive: true });
  await writeFile(join(REPO, "out", `e2e-kubespray-${label}.log`), output.join("\n"));
  const recap = output.slice(output.map((l) => l.startsWith("PLAY RECAP")).lastIndexOf(true));
  console.log(`e2e:kubespray ${label}: runner exit ${run.exitCode}; termination message: ${run.terminationMessage || "(none)"}\n${recap.join("\n")}`);
  if (run.exitCode !== 0) {
    // What the control plane was doing: restarted containers say a starved scheduler or controller manager.
    const master = vms.get(NODE_A.name);
    if (master) console.log(`e2e:kubespray ${label}: containers on ${NODE_A.name}:\n${(await master.ssh("crictl ps -a 2>&1 | head -30")).output}`);
  }
  expect(run.exitCode, run.terminationMessage || output.slice(-60).join("\n")).toBe(0);
  return output;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-e2e-kubespray-"));
  await requireOwnNetwork();
  const lock = await loadLock(DEFAULT_LOCK);
  upgradeVersion = (lock.artifacts.kubernetes as { version: string }).version.replace(/^v/, "");
  const older = Object.values(lock.artifacts).find((e) => e.source === "gomod" && e.module === "k8s.io/kubernetes" && e.version !== `v${upgradeVersion}`);
  if (!older || older.source !== "gomod") throw new Error(`${DEFAULT_LOCK} pins no second Kubernetes version (icn-bootstrap lock-artifacts --also-kubernetes)`);
  kubernetesVersion = older.version.replace(/^v/, "");
  const definition = withExtraKubernetes(await loadDefinition(DEFAULT_DEFINITION), [older.version]);
  // What the appliance serves (the build's stages; `npm run e2e:kubespray` builds first, with
  // the network, and builds the older version's binaries): both versions.
  content = await runStages({ definition, lock, lockPath: DEFAULT_LOCK, stagesDir: stagesDir(), sections: ["content"] });
  pinsManifest = yaml.load(await readFile(join(content.files!.dir, "tree", MANIFESTS_TARGET, "bpa/kubespray-pins.yaml"), "utf8")) as typeof pinsManifest;
  const [built] = (await runStages({ definition: { ...definition, osImages: ["compute-node"] }, lock, stagesDir: stagesDir(), sections: ["os-images"] }))
    .osImages;
  const served = await readOsImage(built!.image!);
  osImage = join(built!.image!.dir, "tree", FILES_ROOT, served.path);
  runnerRoot = join(work, "runner-root");
  const runner = await unpackImage(content.images!.dir, RUNNER, runnerRoot);
  runnerConfig = await readImageConfig(join(content.images!.dir, "oci"), runner.digest);
  builtImages = JSON.parse(await readFile(join(content.images!.dir, IMAGES_JSON), "utf8")) as BuiltImage[];
  await startApplianceServices(join(content.files!.dir, "tree", FILES_ROOT), join(content.registry!.dir, "tree", REGISTRY_STORAGE));
  phase("appliance content ready: file server, registry (TLS), runner image, OS image");

  kube = await startKubeTestServer();
  kc = new KubeConfig();
  kc.loadFromFile(kube.kubeconfigPath);
  c = makeClients(kc);
  await applyCrds(kc);
  for (const name of ["bpa-system", NAMESPACE]) {
    await c.core.createNamespace({ body: { metadata: { name } } });
    await c.core.createNamespacedServiceAccount({ namespace: name, body: { metadata: { name: "default" } } });
  }
  const config = await shippedConfig();
  // What the appliance's first boot does: the registry's site CA for the BPA, and the build's kubespray pins from its manifests.
  await c.core.createNamespacedConfigMap({
    namespace: config.namespace,
    body: { metadata: { name: config.registryCA.configMap }, data: { [config.registryCA.key]: siteCA.pem } },
  });
  await c.core.createNamespacedConfigMap({
    namespace: pinsManifest.metadata.namespace,
    body: { metadata: { name: pinsManifest.metadata.name }, data: pinsManifest.data },
  });
  // The appliance's addons catalog as first boot applies it, its charts at this network's registry address.
  const catalog = yaml.load(await readFile(join(REPO, "manifests/bpa/addons.yaml"), "utf8")) as typeof pinsManifest;
  await c.core.createNamespacedConfigMap({
    namespace: catalog.metadata.namespace,
    body: {
      metadata: { name: catalog.metadata.name },
      data: Object.fromEntries(Object.entries(catalog.data).map(([k, v]) => [k, v.replaceAll("oci://bootstrap.icn:5000/", `oci://${REGISTRY_HOST}/`)])),
    },
  });
  operator = new Operator({ kc, config, log: makeLogger({ level: process.env.BPA_TEST_LOG ? "debug" : "warn", fields: { op: "e2e" } }) });
  await operator.start();
  phase("API server and BPA operator running");
}, 2 * HOUR);

afterAll(async () => {
  console.log(phaseSummary());
  for (const vm of vms.values()) await vm.stop?.();
  await operator?.stop?.();
  await kube?.stop();
  if (nginx && nginx.exitCode === null) {
    nginx.kill("SIGTERM");
    await nginx;
  }
  await registry?.stop();
  await uploadsRegistry?.stop();
  for (const link of [...NODES.map((n) => n.tap), BRIDGE]) await execa("ip", ["link", "del", link], { reject: false });
  if (work && process.env.ICN_KEEP_TEST_TMP !== "1") await rm(work, { recursive: true, force: true });
});

describe("an application cluster installed by the real kubespray, offline", () => {
  let job: V1Job;
  const output: string[] = [];
  let kubectl: (...args: string[]) => Promise<{ exitCode?: number; all?: string }>;
  let builtPause: BuiltImage;

  it(
    "the BPA makes the node's user-data; the node boots the OS image with it",
    async () => {
      // Every addon of the catalog, the SR-IOV device plugin with values of the site's (a resource of the spare NIC).
      const addons = (
        yaml.load(((await c.core.readNamespacedConfigMap({ namespace: "bpa-system", name: "bpa-addons" })).data ?? {})["addons.yaml"]!) as {
          addons: { name: string }[];
        }
      ).addons.map(({ name }) =>
        name === "sriov-network-device-plugin"
          ? {
              name,
              values: {
                config: {
                  resourceList: [
                    {
                      resourceName: SPARE_NIC_RESOURCE,
                      selectors: { vendors: ["1af4"], drivers: ["virtio-pci"], pciAddresses: [SPARE_NIC_PCI] },
                    },
                  ],
                },
              },
            }
          : { name },
      );
      await createProvisioning(c, NAMESPACE, { metadata: { name: PROVISIONING }, spec: { master: [{ cpu: 2, memory: "2Gi" }], kubernetesVersion, addons } });
      const { userData, privateKey } = await bpaUserDataAndKey();
      const vm = await bootNode(NODE_A, userData, privateKey);
      expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
      phase(`compute node booted (${vm.accel}), cloud-init done after ${vm.seconds.toFixed(0)} s`);
      const whoami = await vm.ssh("hostname; ip -4 -o addr show scope global | awk '{print $4}'");
      expect(whoami.output).toBe(`${NODE_NAME}\n${NODE_IP}/24`);
      // Offline: the node reaches the appliance's services and nothing else.
      expect((await vm.ssh(`curl -sS -o /dev/null -w '%{http_code}' ${FILES_REPO}/`)).output).toBe("404");
    },
    HOUR,
  );

  it("the BPA assigns the node (a provisioned BareMetalHost) and creates the install Job with its inventory", async () => {
    const memoryMiB = NODE_A.memoryMiB;
    await createHost(c, NAMESPACE, bmh({ name: NODE_NAME, namespace: NAMESPACE, cpu: 2, ram: memoryMiB, ip: NODE_IP, mac: NODE_MAC }));
    job = await waitFor("the install Job", async () => (await listInstallJobs(c, NAMESPACE))[0], 60_000, 500);
    const p = await getProvisioning(c, NAMESPACE, PROVISIONING);
    expect(p.status?.assignedHosts?.map((h) => `${h.role}=${h.name} ${h.ip}`)).toEqual([`master=${NODE_NAME} ${NODE_IP}`]);
    const inventory = await c.core.readNamespacedConfigMap({ namespace: NAMESPACE, name: p.status!.inventoryConfigMap! });
    expect(inventory.data!["hosts.ini"]).toContain(`${NODE_NAME} ansible_host=${NODE_IP} ip=${NODE_IP}`);
    expect(yaml.load(inventory.data!["offline.yml"]!)).toMatchObject({ registry_host: REGISTRY_HOST, files_repo: FILES_REPO, kube_version: kubernetesVersion });
    phase(`Provisioning: host assigned, Job ${job.metadata!.name} created`);
  });

  it(
    "the runner image runs kubespray's cluster.yml against the node and hands the kubeconfig back; the Provisioning is Ready",
    async () => {
      output.push(...(await runJob(job, "install")));
      expect(output.join("\n")).toMatch(new RegExp(`${NODE_NAME}\\s+: ok=\\d+\\s+changed=\\d+\\s+unreachable=0\\s+failed=0`));
      const p = await waitFor(
        "the Provisioning to be Ready",
        async () => {
          const current = await getProvisioning(c, NAMESPACE, PROVISIONING);
          return current.status?.phase === "Ready" || current.status?.phase === "Failed" ? current : undefined;
        },
        60_000,
        500,
      );
      expect(p.status?.phase, JSON.stringify(p.status?.conditions)).toBe("Ready");
      phase("kubespray done; Provisioning Ready");
    },
    8 * HOUR,
  );

  it(
    "through the kubeconfig in the Provisioning's Secret: the node is Ready and a pod pulled through the appliance's registry runs",
    async () => {
      const p = await getProvisioning(c, NAMESPACE, PROVISIONING);
      const secret = await c.core.readNamespacedSecret({ namespace: NAMESPACE, name: p.status!.kubeconfigSecret! });
      const kubeconfig = join(work, "cluster-a.kubeconfig");
      await writeFile(join(work, "cluster-a.kubeconfig"), Buffer.from(secret.data!.kubeconfig!, "base64"), { mode: 0o600 });
      expect(await readFile(kubeconfig, "utf8")).toContain(`server: https://${NODE_IP}:6443`);
      const kubectlPath = join(content.files!.dir, "tree", FILES_ROOT, "kubespray/dl.k8s.io/release", `v${upgradeVersion}`, "bin/linux/amd64/kubectl");
      kubectl = (...args: string[]) => execa(kubectlPath, ["--kubeconfig", kubeconfig, "--request-timeout=60s", ...args], { all: true, reject: false });
      const nodes = await waitFor(
        "the node to be Ready",
        async () => {
          const r = await kubectl("get", "nodes", "-o", "wide");
          return / Ready /.test(r.all ?? "") ? r.all : undefined;
        },
        15 * 60_000,
        5_000,
      );
      console.log(`e2e:kubespray kubectl get nodes:\n${nodes}`);
      expect(nodes).toMatch(new RegExp(`^${NODE_NAME}\\s+Ready\\s+control-plane\\s+\\S+\\s+v${kubernetesVersion.replace(/\./g, "\\.")}`, "m"));
      phase("kubectl get nodes: Ready");

      // The pause image as upstream names it: containerd's mirror sends registry.k8s.io to the appliance.
      const pause = (builtPause = builtImages.find((i) => i.ref.startsWith("registry.k8s.io/pause:"))!);
      expect((await kubectl("run", "probe", `--image=${pause.ref}`, "--restart=Never")).exitCode).toBe(0);
      const phaseOf = await waitFor(
        "the probe pod to run",
        async () => {
          const r = await kubectl("get", "pod", "probe", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].imageID}");
          return (r.all ?? "").startsWith("Running") ? r.all : undefined;
        },
        15 * 60_000,
        5_000,
      );
      expect(phaseOf).toContain(pause.digest);
      const pods = await kubectl("get", "pods", "-A", "-o", "wide");
      console.log(`e2e:kubespray kubectl get pods -A:\n${pods.all}`);
      // The cluster's DNS serves: CoreDNS is available (it exits on a forwarding loop or a missing upstream).
      const dns = await kubectl("-n", "kube-system", "wait", "--for=condition=Available", "deployment/coredns", "--timeout=600s");
      if (dns.exitCode !== 0) console.log(`e2e:kubespray CoreDNS:\n${(await kubectl("-n", "kube-system", "logs", "-l", "k8s-app=kube-dns", "--tail=20")).all}`);
      expect(dns.exitCode, dns.all).toBe(0);
      phase("CoreDNS available");
      // Nothing came from anywhere but the appliance: every image of every pod is from its registry (by digest).
      const digests = await imageDigestsOn(NODE_NAME);
      const known = new Set(builtImages.map((i) => i.digest));
      expect([...digests].filter((d) => !known.has(d!))).toEqual([]);
      phase("probe pod Running from the seeded registry");
    },
    HOUR,
  );

  it(
    "addons: the BPA's addons Job installs the appliance's charts (Multus, NFD, SR-IOV, QAT) from its registry; each runs from the build's images",
    async () => {
      const addonsJob = await waitFor(
        "the addons Job",
        async () => (await c.batch.listNamespacedJob({ namespace: NAMESPACE, labelSelector: "bpa.akraino.org/component=addons" })).items[0],
        120_000,
        1_000,
      );
      phase(`addons Job ${addonsJob.metadata!.name} created`);
      await runJob(addonsJob, "addons");
      const p = await expectDefaultAddonsInstalled(() => getProvisioning(c, NAMESPACE, PROVISIONING), { timeoutMs: 120_000, intervalMs: 1_000 });
      expect(p.status?.phase).toBe("Ready");
      phase("addons installed: AddonsReady");

      // NFD labels the node with what it found (a VM: the hypervisor bit of CPUID among them).
      const labels = await waitFor(
        "NFD's node labels",
        async () => {
          const r = await kubectl("get", "node", NODE_NAME, "-o", "jsonpath={.metadata.labels}");
          return /feature\.node\.kubernetes\.io\/cpu-/.test(r.all ?? "") ? r.all : undefined;
        },
        10 * 60_000,
        5_000,
      );
      console.log(`e2e:kubespray node labels: ${labels}`);
      expect(labels).toContain('"feature.node.kubernetes.io/cpu-cpuid.HYPERVISOR":"true"');
      phase("NFD labels on the node");

      // Multus: a pod asking for a macvlan NetworkAttachmentDefinition gets a second interface.
      const nic = (await vms.get(NODE_NAME)!.ssh(`ip -o -4 addr show to ${NODE_IP} | awk '{print $2}'`)).output.trim();
      expect(nic).toMatch(/^\w+$/);
      const nad = join(work, "macvlan.yaml");
      await writeFile(
        nad,
        [
          "apiVersion: k8s.cni.cncf.io/v1",
          "kind: NetworkAttachmentDefinition",
          "metadata: { name: macvlan-e2e, namespace: default }",
          "spec:",
          `  config: '{"cniVersion":"0.3.1","type":"macvlan","master":"${nic}","mode":"bridge","ipam":{"type":"static","addresses":[{"address":"10.254.7.10/24"}]}}'`,
          "---",
          "apiVersion: v1",
          "kind: Pod",
          "metadata: { name: two-nics, namespace: default, annotations: { k8s.v1.cni.cncf.io/networks: macvlan-e2e } }",
          `spec: { restartPolicy: Never, containers: [{ name: pause, image: "${builtPause.ref}" }] }`,
          "",
        ].join("\n"),
      );
      const applied = await kubectl("apply", "-f", nad);
      expect(applied.exitCode, applied.all).toBe(0);
      const status = await waitFor(
        "the two-nics pod's network status",
        async () => {
          const r = await kubectl("get", "pod", "two-nics", "-o", "jsonpath={.status.phase} {.metadata.annotations.k8s\\.v1\\.cni\\.cncf\\.io/network-status}");
          return (r.all ?? "").startsWith("Running") ? r.all : undefined;
        },
        10 * 60_000,
        5_000,
      );
      console.log(`e2e:kubespray two-nics: ${status}`);
      const networks = JSON.parse(status.slice(status.indexOf(" ") + 1)) as { name: string; interface?: string; ips?: string[] }[];
      expect(networks.find((n) => n.name === "default/macvlan-e2e")).toMatchObject({ interface: "net1", ips: ["10.254.7.10"] });
      phase("Multus: a pod with a second interface (macvlan)");

      // SR-IOV: the device plugin finds the spare NIC the Provisioning's values select, named from
      // the PCI ID database its image carries, and the kubelet offers it; a pod asking for it runs.
      const sriovdp = await kubectl("-n", "kube-system", "rollout", "status", "daemonset/kube-sriov-device-plugin", "--timeout=600s");
      expect(sriovdp.exitCode, sriovdp.all).toBe(0);
      const resource = `intel.com/${SPARE_NIC_RESOURCE}`;
      const offered = await waitFor(
        `${resource} in the node's allocatable`,
        async () => {
          const r = await kubectl("get", "node", NODE_NAME, "-o", "jsonpath={.status.allocatable}");
          return (JSON.parse(r.all || "{}") as Record<string, string>)[resource];
        },
        5 * 60_000,
        5_000,
      );
      expect(offered).toBe("1");
      const sriovLog = (await kubectl("-n", "kube-system", "logs", "daemonset/kube-sriov-device-plugin")).all ?? "";
      console.log(
        `e2e:kubespray SR-IOV device plugin log (device lines):\n${sriovLog
          .split("\n")
          .filter((l) => /device found|New resource server|Registered/i.test(l))
          .join("\n")}`,
      );
      // The vendor's name comes from the image's pci.ids: without it the plugin exits at start.
      expect(sriovLog).toMatch(new RegExp(`device found: ${SPARE_NIC_PCI.replaceAll(".", "\\.")}.*Red Hat`));
      const claim = join(work, "spare-nic-pod.yaml");
      await writeFile(
        claim,
        yaml.dump({
          apiVersion: "v1",
          kind: "Pod",
          metadata: { name: "spare-nic", namespace: "default" },
          spec: { restartPolicy: "Never", containers: [{ name: "pause", image: builtPause.ref, resources: { limits: { [resource]: "1" } } }] },
        }),
      );
      expect((await kubectl("apply", "-f", claim)).exitCode).toBe(0);
      const claimed = await kubectl("wait", "pod/spare-nic", "--for=jsonpath={.status.phase}=Running", "--timeout=300s");
      expect(claimed.exitCode, (await kubectl("describe", "pod", "spare-nic")).all).toBe(0);
      // The SR-IOV CNI plugin's DaemonSet put its binary among the node's CNI plugins.
      const sriovCni = await kubectl("-n", "kube-system", "rollout", "status", "daemonset/kube-sriov-cni-ds", "--timeout=600s");
      expect(sriovCni.exitCode, sriovCni.all).toBe(0);
      const sriovOnNode = (await vms.get(NODE_NAME)!.ssh("stat -c '%A %U' /opt/cni/bin /opt/cni/bin/sriov")).output;
      const sriovCniLog = (await kubectl("-n", "kube-system", "logs", "daemonset/kube-sriov-cni-ds", "--tail=20")).all;
      expect(sriovOnNode, `${sriovOnNode}\n${sriovCniLog}`).toMatch(/^drwxr-xr-x root\n-rwxr-xr-x root$/);
      phase("SR-IOV: the device plugin offers the spare NIC, a pod got it; the CNI plugin on the node");

      // The QAT device plugin runs and advertises no device: the VM has none.
      const qat = await kubectl("-n", "kube-system", "rollout", "status", "daemonset/intel-qat-plugin", "--timeout=600s");
      expect(qat.exitCode, qat.all).toBe(0);
      console.log(`e2e:kubespray QAT plugin log:\n${(await kubectl("-n", "kube-system", "logs", "daemonset/intel-qat-plugin", "--tail=20")).all}`);
      const allocatable = await kubectl("get", "node", NODE_NAME, "-o", "jsonpath={.status.allocatable}");
      expect(allocatable.all).not.toMatch(/qat\.intel\.com\/[^"]+":"[1-9]/);
      phase("QAT device plugin running, no devices");

      // Every image on the node, the addons' too, came from the appliance's registry at a digest the build made.
      const digests = await imageDigestsOn(NODE_NAME);
      const known = new Set(builtImages.map((i) => i.digest));
      expect([...digests].filter((d) => !known.has(d!))).toEqual([]);
      for (const ref of [
        "ghcr.io/k8snetworkplumbingwg/multus-cni:",
        "registry.k8s.io/nfd/node-feature-discovery:",
        "ghcr.io/k8snetworkplumbingwg/sriov-network-device-plugin:",
        "ghcr.io/k8snetworkplumbingwg/sriov-cni:",
        "docker.io/intel/intel-qat-plugin:",
      ])
        expect(digests.has(builtImages.find((i) => i.ref.startsWith(ref))!.digest), ref).toBe(true);
      console.log(`e2e:kubespray kubectl get pods -A:\n${(await kubectl("get", "pods", "-A", "-o", "wide")).all}`);
    },
    HOUR,
  );

  it(
    "a site's own chart: uploaded through the REST API, installed by the next addons Job, then its new version rolls out",
    async () => {
      // The REST API as the appliance runs it, pushing to the registry through its TLS front with the site CA.
      const env: Record<string, string> = { BPA_API_REGISTRY_URL: `https://${REGISTRY_HOST}`, BPA_API_PULL_HOST: REGISTRY_HOST };
      const api = await startApiFixture(kc, c, "e2e-rest", {
        env,
        prepare: async (namespace) => {
          Object.assign(env, await createRegistryAccess(c, namespace, { username: "push", password: "unused-here", ca: siteCA.pem }));
        },
      });
      try {
        const token = await tokenFor(c, api.ns, "bpa-api-uploader");
        const apiCA = join(work, "api-ca.crt");
        await writeFile(apiCA, api.tls.ca);
        const { helm } = await artifactPaths(["helm"]);
        const ran = new Set(
          (await c.batch.listNamespacedJob({ namespace: NAMESPACE, labelSelector: "bpa.akraino.org/component=addons" })).items.map((j) => j.metadata!.name!),
        );

        const release = async (version: string, greeting: string) => {
          // What a site packages: a Deployment of the seeded pause image, its greeting from the values.
          const src = join(work, `${SITE_CHART}-${version}`, SITE_CHART);
          await mkdir(join(src, "templates"), { recursive: true });
          await writeFile(join(src, "Chart.yaml"), yaml.dump({ apiVersion: "v2", name: SITE_CHART, version, type: "application" }));
          await writeFile(join(src, "values.yaml"), yaml.dump({ greeting }));
          await writeFile(
            join(src, "templates", "deployment.yaml"),
            [
              "apiVersion: apps/v1",
              "kind: Deployment",
              `metadata: { name: ${SITE_CHART} }`,
              "spec:",
              `  selector: { matchLabels: { app: ${SITE_CHART} } }`,
              "  template:",
              `    metadata: { labels: { app: ${SITE_CHART} } }`,
              "    spec:",
              "      containers:",
              `        - { name: app, image: "${builtPause.ref}", env: [{ name: GREETING, value: {{ .Values.greeting | quote }} }] }`,
              "",
            ].join("\n"),
          );
          const packaged = await execa(helm, ["package", src, "--destination", join(work, `${SITE_CHART}-${version}`)], { all: true, reject: false });
          expect(packaged.exitCode, packaged.all).toBe(0);
          const upload = await runCli([
            "upload",
            join(work, `${SITE_CHART}-${version}`, `${SITE_CHART}-${version}.tgz`),
            "--kind",
            "chart",
            "--name",
            `${SITE_CHART_REPOSITORY}:${version}`,
            "--server",
            api.url,
            "--cacert",
            apiCA,
            "--token",
            token,
          ]);
          expect(upload.exitCode, upload.all).toBe(0);
          phase(`${SITE_CHART} ${version} uploaded through the REST API`);

          // The Provisioning names it beside the addons it has; the BPA makes the next addons Job.
          const current = await getProvisioning(c, NAMESPACE, PROVISIONING);
          const others = (current.spec?.addons ?? []).filter((a) => a.name !== SITE_CHART);
          await patchProvisioningSpec({
            addons: [
              ...others,
              { name: SITE_CHART, chart: `oci://${REGISTRY_HOST}/${SITE_CHART_REPOSITORY}`, version, namespace: SITE_CHART, values: { greeting } },
            ],
          });
          const job = await waitFor(
            "the next addons Job",
            async () =>
              (await c.batch.listNamespacedJob({ namespace: NAMESPACE, labelSelector: "bpa.akraino.org/component=addons" })).items.find(
                (j) => !ran.has(j.metadata!.name!),
              ),
            120_000,
            1_000,
          );
          ran.add(job.metadata!.name!);
          await runJob(job, `addons-${SITE_CHART}-${version}`);
          const settled = await waitFor(
            `${SITE_CHART} ${version} in status.addons`,
            async () => {
              const p = await getProvisioning(c, NAMESPACE, PROVISIONING);
              const mine = p.status?.addons?.find((a) => a.name === SITE_CHART);
              return mine?.version === version && (mine.state === "Installed" || mine.state === "Failed") ? p : undefined;
            },
            120_000,
            1_000,
          );
          expect(
            settled.status?.addons?.find((a) => a.name === SITE_CHART),
            JSON.stringify(settled.status?.conditions),
          ).toMatchObject({ version, state: "Installed" });
          expect(settled.status?.conditions?.find((cond) => cond.type === "AddonsReady")).toMatchObject({ status: "True" });
          const rolled = await kubectl("-n", SITE_CHART, "rollout", "status", `deployment/${SITE_CHART}`, "--timeout=300s");
          expect(rolled.exitCode, rolled.all).toBe(0);
          const running = await kubectl(
            "-n",
            SITE_CHART,
            "get",
            "pods",
            "-l",
            `app=${SITE_CHART}`,
            "-o",
            'jsonpath={range .items[*]}{.status.phase} {.spec.containers[0].env[0].value}{"\\n"}{end}',
          );
          expect(running.all?.trim().split("\n")).toContain(`Running ${greeting}`);
          phase(`${SITE_CHART} ${version} installed by the BPA's addons Job: its pod runs with greeting "${greeting}"`);
        };

        await release("0.1.0", "hello");
        await release("0.2.0", "hello again");
      } finally {
        await api.stop();
      }
    },
    HOUR,
  );

  it.runIf(SCALE)(
    "day 2: a worker entry added makes the BPA assign the second node and start a scale Job limited to it",
    async () => {
      const { userData, privateKey } = await bpaUserDataAndKey();
      const vm = await bootNode(NODE_B, userData, privateKey);
      expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
      phase(`second node booted (${vm.accel}), cloud-init done after ${vm.seconds.toFixed(0)} s`);
      await createHost(c, NAMESPACE, bmh({ name: NODE_B.name, namespace: NAMESPACE, cpu: NODE_B.cpus, ram: NODE_B.memoryMiB, ip: NODE_B.ip, mac: NODE_B.mac }));
      const seen = new Set((await listInstallJobs(c, NAMESPACE)).map((j) => j.metadata!.name));
      await patchProvisioningSpec({ worker: [{ cpu: NODE_B.cpus, memory: "2Gi" }] });
      job = await waitFor("the scale Job", async () => (await listInstallJobs(c, NAMESPACE)).find((j) => !seen.has(j.metadata!.name)), 60_000, 500);
      const env = Object.fromEntries(job.spec!.template.spec!.containers[0]!.env!.map((e) => [e.name, e.value]));
      expect(env).toMatchObject({ BPA_OPERATION: "scale", BPA_PLAYBOOK: "scale.yml", BPA_LIMIT: `${NODE_B.name},${NODE_A.name}` });
      const p = await getProvisioning(c, NAMESPACE, PROVISIONING);
      expect(p.status?.assignedHosts?.map((h) => `${h.role}=${h.name}`)).toEqual([`master=${NODE_A.name}`, `worker=${NODE_B.name}`]);
      phase(`Provisioning Updating: Job ${job.metadata!.name} (scale.yml --limit ${env.BPA_LIMIT})`);
    },
    HOUR,
  );

  it.runIf(SCALE)(
    "the runner's scale.yml joins it: both nodes Ready, a pod runs on the new one, status shows the grown cluster",
    async () => {
      await runJob(job, "scale");
      const p = await waitFor(
        "the Provisioning Ready with two hosts",
        async () => {
          const current = await getProvisioning(c, NAMESPACE, PROVISIONING);
          return current.status?.phase === "UpdateFailed" || (current.status?.phase === "Ready" && current.status.cluster?.revision === 2)
            ? current
            : undefined;
        },
        60_000,
        500,
      );
      expect(p.status?.phase, JSON.stringify(p.status?.conditions)).toBe("Ready");
      expect(p.status!.cluster!.hosts.map((h) => h.name)).toEqual([NODE_A.name, NODE_B.name]);
      expect(p.status!.operations!.map((o) => `${o.kind}:${o.result}`)).toEqual(["install:Succeeded", "scale:Succeeded"]);
      phase("scale.yml done; Provisioning Ready with two hosts");
      const nodes = await waitFor(
        "both nodes Ready",
        async () => {
          const r = await kubectl("get", "nodes", "-o", "wide");
          return NODES.every((n) => new RegExp(`^${n.name}\\s+Ready\\s`, "m").test(r.all ?? "")) ? r.all : undefined;
        },
        15 * 60_000,
        5_000,
      );
      console.log(`e2e:kubespray kubectl get nodes:\n${nodes}`);
      expect(nodes).toMatch(new RegExp(`^${NODE_B.name}\\s+Ready\\s+\\S+\\s+\\S+\\s+v${kubernetesVersion.replace(/\./g, "\\.")}`, "m"));
      phase("kubectl get nodes: both Ready");
      const overrides = JSON.stringify({ spec: { nodeSelector: { "kubernetes.io/hostname": NODE_B.name } } });
      expect((await kubectl("run", "probe-b", `--image=${builtPause.ref}`, "--restart=Never", `--overrides=${overrides}`)).exitCode).toBe(0);
      const running = await waitFor(
        "the probe pod on the new node",
        async () => {
          const r = await kubectl("get", "pod", "probe-b", "-o", "jsonpath={.status.phase} {.spec.nodeName}");
          return (r.all ?? "").startsWith("Running") ? r.all : undefined;
        },
        15 * 60_000,
        5_000,
      );
      expect(running).toBe(`Running ${NODE_B.name}`);
      // The operator reads the nodes through the kubeconfig: both, on the cluster's version.
      const observed = await waitFor(
        "status.nodes with both nodes",
        async () => {
          const current = await getProvisioning(c, NAMESPACE, PROVISIONING);
          return current.status?.nodes?.length === 2 ? current.status.nodes : undefined;
        },
        10 * 60_000,
        2_000,
      ).catch(async () => (await getProvisioning(c, NAMESPACE, PROVISIONING)).status?.nodes);
      console.log(`e2e:kubespray status.nodes: ${JSON.stringify(observed)}`);
      expect(observed?.map((n) => `${n.name} ${n.kubeletVersion}`)).toEqual(NODES.map((n) => `${n.name} v${kubernetesVersion}`));
      phase("probe pod Running on the new node; status.nodes shows both");
    },
    8 * HOUR,
  );

  it(
    "day 2: a newer spec.kubernetesVersion makes the BPA start an upgrade Job over every node",
    async () => {
      const seen = new Set((await listInstallJobs(c, NAMESPACE)).map((j) => j.metadata!.name));
      await patchProvisioningSpec({ kubernetesVersion: upgradeVersion });
      job = await waitFor("the upgrade Job", async () => (await listInstallJobs(c, NAMESPACE)).find((j) => !seen.has(j.metadata!.name)), 60_000, 500);
      const env = Object.fromEntries(job.spec!.template.spec!.containers[0]!.env!.map((e) => [e.name, e.value]));
      expect(env).toMatchObject({ BPA_OPERATION: "upgrade", BPA_PLAYBOOK: "upgrade-cluster.yml" });
      expect(env.BPA_LIMIT).toBeUndefined();
      const inventory = await c.core.readNamespacedConfigMap({
        namespace: NAMESPACE,
        name: job.spec!.template.spec!.volumes!.find((v) => v.name === "inventory")!.configMap!.name!,
      });
      expect(yaml.load(inventory.data!["offline.yml"]!)).toMatchObject({ kube_version: upgradeVersion });
      phase(`Provisioning Updating: Job ${job.metadata!.name} (upgrade-cluster.yml ${kubernetesVersion} -> ${upgradeVersion})`);
    },
    HOUR,
  );

  it(
    "the runner's upgrade-cluster.yml brings every node to the new version; status says so",
    async () => {
      await runJob(job, "upgrade");
      const p = await waitFor(
        "the Provisioning Ready on the new version",
        async () => {
          const current = await getProvisioning(c, NAMESPACE, PROVISIONING);
          return current.status?.phase === "UpdateFailed" || (current.status?.phase === "Ready" && current.status.cluster?.kubernetesVersion === upgradeVersion)
            ? current
            : undefined;
        },
        60_000,
        500,
      );
      expect(p.status?.phase, JSON.stringify(p.status?.conditions)).toBe("Ready");
      expect(p.status!.operations!.map((o) => `${o.kind}:${o.result}`)).toEqual([
        "install:Succeeded",
        ...(SCALE ? ["scale:Succeeded"] : []),
        "upgrade:Succeeded",
      ]);
      expect(p.status!.operations!.at(-1)).toMatchObject({ fromVersion: kubernetesVersion, kubernetesVersion: upgradeVersion });
      phase("upgrade-cluster.yml done; Provisioning Ready on the new version");
      const escaped = upgradeVersion.replace(/\./g, "\\.");
      const nodes = await waitFor(
        "every node Ready on the new version",
        async () => {
          const r = await kubectl("get", "nodes", "-o", "wide");
          return CLUSTER_NODES.every((n) => new RegExp(`^${n.name}\\s+Ready\\s+\\S+\\s+\\S+\\s+v${escaped}\\s`, "m").test(r.all ?? "")) ? r.all : undefined;
        },
        15 * 60_000,
        5_000,
      ).catch(async () => (await kubectl("get", "nodes", "-o", "wide")).all);
      console.log(`e2e:kubespray kubectl get nodes:\n${nodes}`);
      for (const n of CLUSTER_NODES) expect(nodes).toMatch(new RegExp(`^${n.name}\\s+Ready\\s+\\S+\\s+\\S+\\s+v${escaped}\\s`, "m"));
      // The control plane runs the new version's images, from the appliance's registry.
      const images = await kubectl("-n", "kube-system", "get", "pods", "-o", 'jsonpath={range .items[*]}{.spec.containers[0].image}{"\\n"}{end}');
      for (const component of ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"])
        expect(images.all).toContain(`/${component}:v${upgradeVersion}`);
      expect(images.all).not.toContain(`:v${kubernetesVersion}`);
      const observed = await waitFor(
        "status.nodes on the new version",
        async () => {
          const current = await getProvisioning(c, NAMESPACE, PROVISIONING);
          return current.status?.nodes?.every((n) => n.kubeletVersion === `v${upgradeVersion}`) && current.status.nodes.length === CLUSTER_NODES.length
            ? current.status.nodes
            : undefined;
        },
        10 * 60_000,
        2_000,
      ).catch(async () => (await getProvisioning(c, NAMESPACE, PROVISIONING)).status?.nodes);
      console.log(`e2e:kubespray status.nodes: ${JSON.stringify(observed)}`);
      expect(observed?.map((n) => `${n.name} ${n.kubeletVersion}`)).toEqual(CLUSTER_NODES.map((n) => `${n.name} v${upgradeVersion}`));
      phase(`${CLUSTER_NODES.length === 1 ? "the node" : "every node"} on the new version; status.nodes shows it`);
    },
    8 * HOUR,
  );
});
