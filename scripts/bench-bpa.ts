/**
 * BPA benchmarks (npm run bench:bpa):
 *
 *  1. Role assignment time for 5,000 hosts and 100 roles (target < 200 ms), median of
 *     several runs, with a 500-host baseline measured in the same run.
 *  2. Time from creating a Provisioning to its install Job existing, against a real
 *     kube-apiserver started by the test harness (target < 2 s).
 *
 * Prints a table; `--json FILE` also writes the figures.
 */
import { writeFile } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { BPA_GROUP, BPA_VERSION, LABEL_QAT, LABEL_SRIOV, PROVISIONING_PLURAL } from "../bpa/api/constants.js";
import type { RoleRequirement } from "../bpa/api/spec.js";
import type { BareMetalHost } from "../bpa/api/types.js";
import { hostFacts, type HostFacts } from "../bpa/assign/hosts.js";
import { planAssignment } from "../bpa/assign/plan.js";
import { parseConfig } from "../bpa/config/config.js";
import { makeClients } from "../bpa/runtime/kube.js";
import { silentLogger } from "../bpa/runtime/log.js";
import { Operator } from "../bpa/operator.js";
import { startKubeTestServer } from "../test/helpers/kube-apiserver.js";
import { bmh } from "../test/helpers/fixtures/bpa/hosts.js";
import { prng } from "../test/helpers/fixtures/prng.js";
import { makeTestCA } from "../test/helpers/fixtures/bpa/registry-ca.js";
import { testPins } from "../test/helpers/fixtures/bpa/pins.js";
import { createApplianceCrds } from "../test/helpers/crds.js";
import { writeBareMetalHost } from "../test/helpers/bare-metal-hosts.js";

const { values } = parseArgs({
  options: {
    json: { type: "string" },
    runs: { type: "string", default: "9" },
    "api-runs": { type: "string", default: "15" },
    "skip-api": { type: "boolean", default: false },
  },
});

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)]!;

/** A data-centre-like inventory: a few hardware generations, some SR-IOV NICs and QAT cards. */
function inventory(count: number, seed: number): BareMetalHost[] {
  const rand = prng(seed);
  const shapes = [
    [8, 16384],
    [16, 32768],
    [16, 65536],
    [32, 65536],
    [32, 131072],
    [48, 196608],
    [64, 262144],
    [96, 524288],
  ] as const;
  const hosts: BareMetalHost[] = [];
  for (let i = 0; i < count; i++) {
    const [cpu, ram] = shapes[Math.floor(rand() * shapes.length)]!;
    const labels: Record<string, string> = {};
    if (rand() < 0.3) labels[LABEL_SRIOV] = "true";
    if (rand() < 0.1) labels[LABEL_QAT] = "true";
    hosts.push(bmh({ name: `host-${String(i).padStart(5, "0")}`, cpu, ram, labels, ip: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` }));
  }
  return hosts;
}

function roles(count: number, seed: number): RoleRequirement[] {
  const rand = prng(seed);
  const out: RoleRequirement[] = [];
  for (let i = 0; i < count; i++) {
    const master = i < 5;
    out.push({
      role: master ? "master" : "worker",
      index: master ? i : i - 5,
      cpu: [8, 16, 24, 32][Math.floor(rand() * 4)]!,
      memoryBytes: [16, 32, 64, 128][Math.floor(rand() * 4)]! * 2 ** 30,
      sriov: !master && rand() < 0.4,
      qat: !master && rand() < 0.15,
    });
  }
  return out;
}

/**
 * Times the matching alone (host facts computed beforehand) and the whole assignment as a
 * reconcile does it (host facts read from the BareMetalHost objects, then the matching).
 */
function benchAssignment(hostCount: number, roleCount: number, runs: number) {
  const objects = inventory(hostCount, 42);
  const rs = roles(roleCount, 7);
  const once = () => planAssignment({ roles: rs, hosts: objects.map(hostFacts) });
  once(); // warm-up (JIT)
  once();
  const matching: number[] = [];
  const whole: number[] = [];
  let ok = false;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const hosts: HostFacts[] = objects.map(hostFacts);
    const t1 = performance.now();
    const result = planAssignment({ roles: rs, hosts });
    const t2 = performance.now();
    matching.push(t2 - t1);
    whole.push(t2 - t0);
    ok = result.ok;
  }
  return {
    hosts: hostCount,
    roles: roleCount,
    runs,
    medianMs: median(whole),
    maxMs: Math.max(...whole),
    matchingMedianMs: median(matching),
    assigned: ok,
  };
}

async function benchCreateToJob(runs: number) {
  const server = await startKubeTestServer({ log: () => {} });
  try {
    const kc = new KubeConfig();
    kc.loadFromFile(server.kubeconfigPath);
    const c = makeClients(kc);
    await createApplianceCrds(kc);
    const namespace = "bench";
    await c.core.createNamespace({ body: { metadata: { name: namespace } } });
    // Enough hosts for every run: one master each.
    for (let i = 0; i < runs; i++) {
      const host = bmh({ name: `h${i}`, cpu: 16, ram: 16384, namespace });
      await writeBareMetalHost(c, namespace, host);
    }
    const config = parseConfig(
      {
        runnerImage: "192.168.100.1:5000/icn/kubespray-runner:2.27.0",
        registryHost: "192.168.100.1:5000",
        filesRepo: "http://192.168.100.1:8080",
        namespace,
        watchNamespace: namespace,
      },
      "bench",
    );
    // The kubespray pins the build ships (made-up digests), as the first boot applies them: installs wait for them.
    await c.core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: config.kubesprayPins.configMap }, data: { [config.kubesprayPins.key]: testPins(config.kubernetesVersions ?? ["1.35.4"]) } },
    });
    // The registry's site CA, as the appliance's first boot stores it: installs wait for it.
    const ca = makeTestCA("bench registry CA");
    await c.core.createNamespacedConfigMap({ namespace, body: { metadata: { name: config.registryCA.configMap }, data: { [config.registryCA.key]: ca.pem } } });
    const operator = new Operator({ kc, config, log: silentLogger });
    await operator.start();
    while (!operator.controller) await new Promise((r) => setTimeout(r, 20));
    const times: number[] = [];
    for (let i = 0; i < runs; i++) {
      const name = `p${i}`;
      const t0 = performance.now();
      await c.custom.createNamespacedCustomObject({
        group: BPA_GROUP,
        version: BPA_VERSION,
        namespace,
        plural: PROVISIONING_PLURAL,
        body: { apiVersion: `${BPA_GROUP}/${BPA_VERSION}`, kind: "Provisioning", metadata: { name }, spec: { master: { cpu: 8, memory: "8Gi" } } },
      });
      for (;;) {
        const jobs = await c.batch.listNamespacedJob({ namespace, labelSelector: `bpa.akraino.org/provisioning=${name}` });
        if (jobs.items.length > 0) break;
        await new Promise((r) => setTimeout(r, 5));
      }
      times.push(performance.now() - t0);
    }
    await operator.stop();
    return { runs, apiServerStartupMs: server.startupMs, medianMs: median(times), p95Ms: percentile(times, 95), maxMs: Math.max(...times), firstMs: times[0]! };
  } finally {
    await server.stop();
  }
}

const runs = Number(values.runs);
const small = benchAssignment(500, 100, runs);
const large = benchAssignment(5000, 100, runs);
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
console.log("role assignment (min-cost matching, 100 roles)");
console.log("  (read host facts from BareMetalHost objects + min-cost matching; matching alone in brackets)");
console.log(
  `  500 hosts:   median ${fmt(small.medianMs)} [${fmt(small.matchingMedianMs)}]  max ${fmt(small.maxMs)}  (${runs} runs, assigned: ${small.assigned})`,
);
console.log(
  `  5000 hosts:  median ${fmt(large.medianMs)} [${fmt(large.matchingMedianMs)}]  max ${fmt(large.maxMs)}  (${runs} runs, assigned: ${large.assigned})  target < 200 ms: ${large.medianMs < 200 ? "met" : "MISSED"}`,
);
let api: Awaited<ReturnType<typeof benchCreateToJob>> | undefined;
if (!values["skip-api"]) {
  api = await benchCreateToJob(Number(values["api-runs"]));
  console.log("create Provisioning -> install Job exists (real kube-apiserver, in-process operator)");
  console.log(
    `  median ${fmt(api.medianMs)}  p95 ${fmt(api.p95Ms)}  max ${fmt(api.maxMs)}  first ${fmt(api.firstMs)}  (${api.runs} runs)  target < 2 s: ${api.maxMs < 2000 ? "met" : "MISSED"}`,
  );
}
if (values.json) await writeFile(values.json, `${JSON.stringify({ assignment: { small, large }, createToJob: api }, null, 2)}\n`);
process.exit(0);
