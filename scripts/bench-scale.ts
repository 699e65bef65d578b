/**
 * How the BPA's side of the appliance grows with the hosts it knows (npm run bench:scale):
 * for each N (default 10, 50, 100), a fresh etcd + kube-apiserver (the pinned builds, as
 * the integration tests start them), the appliance's CRDs, N BareMetalHosts in the state
 * Metal3 leaves an inspected, available host in (HardwareData of varied shapes: CPUs,
 * memory, SR-IOV NICs, QAT), the BPA operator in this process, then one Provisioning of
 * 3 control-plane and N-3 workers. Printed per N, and as a ratio to the first N: the time
 * to write the hosts, the time from the Provisioning to its inventory and install Job
 * (roles assigned), the inventory's host count, etcd's database size, the API server's and
 * etcd's memory and CPU while the N hosts are planned and at rest, and this process's heap.
 *
 * A stand-in, named so: no baremetal-operator or Ironic registers and inspects the hosts
 * here (their status is written as Metal3 writes it); that side needs fake BMCs and agents.
 *
 *   npm run bench:scale -- [--hosts 10,50,100] [--rest SECONDS] [--json FILE]
 *   (BENCH_SCALE_TIMEOUT_MS: how long to wait for each step, default 300000)
 */
import { readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { BPA_GROUP, BPA_VERSION, LABEL_QAT, LABEL_SRIOV, PROVISIONING_PLURAL } from "../bpa/api/constants.js";
import { parseConfig } from "../bpa/config/config.js";
import { makeClients, type Clients } from "../bpa/runtime/kube.js";
import { silentLogger } from "../bpa/runtime/log.js";
import { Operator } from "../bpa/operator.js";
import { startKubeTestServer, type KubeTestServer } from "../test/helpers/kube-apiserver.js";
import { bmh } from "../test/helpers/fixtures/bpa/hosts.js";
import { prng } from "../test/helpers/fixtures/prng.js";
import { makeTestCA } from "../test/helpers/fixtures/bpa/registry-ca.js";
import { testPins } from "../test/helpers/fixtures/bpa/pins.js";
import { createApplianceCrds } from "../test/helpers/crds.js";
import { writeBareMetalHost } from "../test/helpers/bare-metal-hosts.js";

const { values } = parseArgs({
  options: {
    hosts: { type: "string", default: "10,50,100" },
    rest: { type: "string", default: "30" },
    json: { type: "string" },
  },
});
const counts = values.hosts!.split(",").map((n) => Number(n.trim()));
const bad = counts.find((n) => !Number.isInteger(n) || n < 4);
if (bad !== undefined) {
  console.error(`bench:scale: --hosts ${values.hosts}: each count must be a whole number of at least 4 (3 control-plane hosts and a worker)`);
  process.exit(2);
}
const restSeconds = Number(values.rest);
const NAMESPACE = "scale";
const CLOCK_TICKS = 100;

/** Server-class shapes of a few hardware generations, some with SR-IOV NICs (Intel X710) and QAT cards. */
const SHAPES = [
  [16, 65536],
  [32, 131072],
  [48, 196608],
  [64, 262144],
] as const;

interface ProcessSample {
  rssMiB: number;
  cpuSeconds: number;
}

/** RSS and CPU time of a process, from /proc. */
async function sample(pid: number): Promise<ProcessSample> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const rssKiB = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
  const fields = (await readFile(`/proc/${pid}/stat`, "utf8")).replace(/^.*\) /, "").split(" ");
  // After the command: state is field 3, utime 14 and stime 15 (1-based in proc(5)).
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { rssMiB: rssKiB / 1024, cpuSeconds: ticks / CLOCK_TICKS };
}

/** The test server's etcd and kube-apiserver processes (its pids file), by name. */
async function serverProcesses(server: KubeTestServer): Promise<{ etcd: number; apiserver: number }> {
  const pids = (await readFile(join(server.dir, "pids"), "utf8")).trim().split(/\s+/).map(Number);
  const named: Record<string, number> = {};
  for (const pid of pids) named[(await readFile(`/proc/${pid}/comm`, "utf8")).trim()] = pid;
  if (!named.etcd || !named["kube-apiserver"]) throw new Error(`bench:scale: etcd and kube-apiserver not found among ${pids.join(", ")}`);
  return { etcd: named.etcd, apiserver: named["kube-apiserver"] };
}

async function etcdDbBytes(server: KubeTestServer): Promise<number> {
  return (await stat(join(server.dir, "etcd-data", "member", "snap", "db"))).size;
}

async function createHosts(c: Clients, count: number): Promise<void> {
  const rand = prng(count);
  const one = async (i: number) => {
    const [cpu, ram] = SHAPES[Math.floor(rand() * SHAPES.length)]!;
    const labels: Record<string, string> = {};
    const sriov = rand() < 0.3;
    if (sriov) labels[LABEL_SRIOV] = "true";
    if (rand() < 0.1) labels[LABEL_QAT] = "true";
    const host = bmh({
      name: `node-${String(i).padStart(3, "0")}`,
      namespace: NAMESPACE,
      cpu,
      ram,
      labels,
      ip: `10.10.${i >> 8}.${i & 255}`,
      ...(sriov ? { nicModel: "0x8086 0x1572" } : {}),
    });
    await writeBareMetalHost(c, NAMESPACE, host);
  };
  // Eight requests in flight at a time.
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < count) await one(next++);
    }),
  );
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = Number(process.env.BENCH_SCALE_TIMEOUT_MS ?? 300_000)): Promise<T> {
  const started = performance.now();
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (performance.now() - started > timeoutMs) throw new Error(`bench:scale: ${what} not seen within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

interface Figures {
  hosts: number;
  writeHostsS: number;
  perHostMs: number;
  planMs: number;
  inventoryHosts: number;
  etcdDbMiB: number;
  apiserverRssMiB: number;
  etcdRssMiB: number;
  planCpuS: number;
  restCpuPercent: number;
  heapMiB: number;
}

async function run(count: number): Promise<Figures> {
  const server = await startKubeTestServer({ log: () => {} });
  let operator: Operator | undefined;
  try {
    const kc = new KubeConfig();
    kc.loadFromFile(server.kubeconfigPath);
    const c = makeClients(kc);
    const pids = await serverProcesses(server);
    await createApplianceCrds(kc);
    await c.core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
    const config = parseConfig(
      {
        runnerImage: "192.168.100.1:5000/icn/kubespray-runner:2.27.0",
        registryHost: "192.168.100.1:5000",
        filesRepo: "http://192.168.100.1:8080",
        namespace: NAMESPACE,
        watchNamespace: NAMESPACE,
      },
      "bench:scale",
    );
    // The kubespray pins the build ships (made-up digests: nothing is downloaded here), as the first boot applies them.
    await c.core.createNamespacedConfigMap({
      namespace: NAMESPACE,
      body: { metadata: { name: config.kubesprayPins.configMap }, data: { [config.kubesprayPins.key]: testPins(config.kubernetesVersions ?? ["1.35.4"]) } },
    });
    const ca = makeTestCA("bench:scale registry CA");
    await c.core.createNamespacedConfigMap({
      namespace: NAMESPACE,
      body: { metadata: { name: config.registryCA.configMap }, data: { [config.registryCA.key]: ca.pem } },
    });

    const written = performance.now();
    await createHosts(c, count);
    const writeHostsS = (performance.now() - written) / 1000;

    const started = new Operator({ kc, config, log: silentLogger });
    operator = started;
    await started.start();
    await until("the operator's controller", async () => started.controller ?? undefined);

    const before = [await sample(pids.apiserver), await sample(pids.etcd)];
    const planned = performance.now();
    const role = { cpu: 8, memory: "16Gi" };
    await c.custom.createNamespacedCustomObject({
      group: BPA_GROUP,
      version: BPA_VERSION,
      namespace: NAMESPACE,
      plural: PROVISIONING_PLURAL,
      body: {
        apiVersion: `${BPA_GROUP}/${BPA_VERSION}`,
        kind: "Provisioning",
        metadata: { name: "site" },
        spec: { master: Array.from({ length: 3 }, () => role), worker: Array.from({ length: count - 3 }, () => role) },
      },
    });
    const selector = "bpa.akraino.org/provisioning=site";
    await until("the install Job", async () =>
      (await c.batch.listNamespacedJob({ namespace: NAMESPACE, labelSelector: selector })).items.length ? true : undefined,
    ).catch(async (error: Error) => {
      const p = (await c.custom.getNamespacedCustomObject({
        group: BPA_GROUP,
        version: BPA_VERSION,
        namespace: NAMESPACE,
        plural: PROVISIONING_PLURAL,
        name: "site",
      })) as {
        status?: unknown;
      };
      throw new Error(`${error.message}; the Provisioning's status: ${JSON.stringify(p.status)}`);
    });
    const planMs = performance.now() - planned;
    const after = [await sample(pids.apiserver), await sample(pids.etcd)];
    const inventory = (await c.core.listNamespacedConfigMap({ namespace: NAMESPACE, labelSelector: selector })).items.find((m) =>
      Object.keys(m.data ?? {}).some((k) => /hosts/.test(k)),
    );
    const hostsFile = Object.entries(inventory?.data ?? {}).find(([k]) => /hosts/.test(k))?.[1] ?? "";
    const inventoryHosts = new Set([...hostsFile.matchAll(/^(\S+)\s+ansible_host=/gm)].map((m) => m[1])).size;

    // At rest with N hosts known: the operator's informers and the API server's watches, nothing changing.
    const restStart = [await sample(pids.apiserver), await sample(pids.etcd)];
    await new Promise((resolve) => setTimeout(resolve, restSeconds * 1000));
    const restEnd = [await sample(pids.apiserver), await sample(pids.etcd)];
    const restCpu = restEnd.reduce((s, p, i) => s + p.cpuSeconds - restStart[i]!.cpuSeconds, 0);
    return {
      hosts: count,
      writeHostsS,
      perHostMs: (writeHostsS * 1000) / count,
      planMs,
      inventoryHosts,
      etcdDbMiB: (await etcdDbBytes(server)) / 2 ** 20,
      apiserverRssMiB: after[0]!.rssMiB,
      etcdRssMiB: after[1]!.rssMiB,
      planCpuS: after.reduce((s, p, i) => s + p.cpuSeconds - before[i]!.cpuSeconds, 0),
      restCpuPercent: (100 * restCpu) / restSeconds,
      heapMiB: process.memoryUsage().heapUsed / 2 ** 20,
    };
  } finally {
    await operator?.stop();
    await server.stop();
  }
}

const results: Figures[] = [];
for (const count of counts) {
  console.log(`bench:scale: ${count} hosts…`);
  results.push(await run(count));
}
const base = results[0]!;
const rows: [string, (f: Figures) => number, number][] = [
  ["write the hosts (s)", (f) => f.writeHostsS, 1],
  ["… per host (ms)", (f) => f.perHostMs, 1],
  ["Provisioning -> inventory and install Job (ms)", (f) => f.planMs, 0],
  ["hosts in the inventory", (f) => f.inventoryHosts, 0],
  ["etcd database (MiB)", (f) => f.etcdDbMiB, 1],
  ["kube-apiserver memory (MiB)", (f) => f.apiserverRssMiB, 0],
  ["etcd memory (MiB)", (f) => f.etcdRssMiB, 0],
  ["API server + etcd CPU while planning (s)", (f) => f.planCpuS, 2],
  [`API server + etcd CPU at rest (% of one CPU, ${restSeconds} s)`, (f) => f.restCpuPercent, 1],
  ["this process's heap, the operator in it (MiB)", (f) => f.heapMiB, 0],
];
console.log(`\n| figure | ${results.map((r) => `${r.hosts} hosts`).join(" | ")} |`);
console.log(`|---|${results.map(() => "---|").join("")}`);
for (const [label, get, digits] of rows) {
  const cells = results.map((r) => {
    const value = get(r);
    const ratio = get(base) > 0 && r !== base ? ` (${(value / get(base)).toFixed(2)}×)` : "";
    return `${value.toFixed(digits)}${ratio}`;
  });
  console.log(`| ${label} | ${cells.join(" | ")} |`);
}
console.log(`\n(ratios against ${base.hosts} hosts; host count ratio ${results.map((r) => (r.hosts / base.hosts).toFixed(0)).join(" / ")})`);
const short = results.filter((r) => r.inventoryHosts !== r.hosts);
if (short.length) {
  console.error(`bench:scale: the inventory of ${short.map((r) => `${r.hosts} hosts held ${r.inventoryHosts}`).join(", ")}`);
  process.exitCode = 1;
}
if (values.json) await writeFile(values.json, `${JSON.stringify(results, null, 2)}\n`);
