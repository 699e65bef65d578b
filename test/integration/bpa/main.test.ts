/**
 * The operator as a command: `npm run bpa` (tsx bpa/main.ts) and the bundled image entry
 * point (node out/bpa/bpa.mjs from `npm run build:bpa`), each run as its own process
 * against the test API server, configured through environment variables as the
 * Deployment does, and stopped with SIGTERM (it must release its Lease).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { execFile } from "node:child_process";
import { beforeAll, describe, expect, it } from "vitest";
import { inject } from "vitest";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import { testPins } from "../../helpers/fixtures/bpa/pins.js";
import {
  applyCrds,
  clients,
  createHost,
  createProvisioning,
  kubeConfig,
  listInstallJobs,
  newNamespace,
  operatorConfig,
  putKubesprayPins,
  putRegistryCA,
  testRegistryCaPem,
  waitForStatus,
} from "../../helpers/operator-suite.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../../../", import.meta.url));
const kc = kubeConfig();
const c = clients(kc);

/** The Node that runs the bundle: this one, or BPA_BUNDLE_NODE (e.g. a Node 18 as in Debian bookworm). */
const bundleNode = process.env.BPA_BUNDLE_NODE ?? process.execPath;

beforeAll(async () => {
  await applyCrds(kc);
  await run("npm", ["run", "--silent", "build:bpa"], { cwd: root });
});

function start(command: string[], ns: string): { child: ChildProcess; output: () => string } {
  let output = "";
  const child = spawn(command[0]!, command.slice(1), {
    cwd: root,
    env: {
      ...process.env,
      BPA_RUNNER_IMAGE: "192.168.100.1:5000/icn/kubespray-runner:2.27.0",
      BPA_REGISTRY_HOST: "192.168.100.1:5000",
      BPA_FILES_REPO: "http://192.168.100.1:8080/kubespray",
      BPA_WATCH_NAMESPACE: ns,
      POD_NAMESPACE: ns,
      BPA_LOG_FORMAT: "json",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (d) => (output += d));
  child.stderr!.on("data", (d) => (output += d));
  return { child, output: () => output };
}

async function exercise(command: string[], prefix: string): Promise<void> {
  const ns = await newNamespace(c, prefix);
  await createHost(c, ns, bmh({ name: "m1", cpu: 16, ram: 16384 }));
  // What the appliance's first boot does: the registry's site CA and the build's kubespray pins.
  await putRegistryCA(operatorConfig(ns), testRegistryCaPem());
  await putKubesprayPins(operatorConfig(ns), testPins(["1.35.4"]));
  const { child, output } = start([...command, "--kubeconfig", inject("kubeconfigPath"), "--health-port", "0"], ns);
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    await createProvisioning(c, ns, { metadata: { name: "cli" }, spec: { master: { cpu: 8, memory: "8Gi" } } });
    await waitForStatus(c, ns, "cli", "Installing", (p) => p.status?.phase === "Installing", 60_000);
    expect(await listInstallJobs(c, ns)).toHaveLength(1);
    const lease = await c.coordination.readNamespacedLease({ namespace: ns, name: "bpa-operator-leader" });
    expect(lease.spec!.holderIdentity).toBeTruthy();
  } catch (error) {
    throw new Error(`${(error as Error).message}\n--- operator output ---\n${output()}`);
  } finally {
    child.kill("SIGTERM");
  }
  expect(await exited).toBe(0);
  const lines = output()
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { msg: string; level: string });
  expect(lines.map((l) => l.msg)).toEqual(
    expect.arrayContaining(["starting", "became leader", "created install Job", "stopping", "released the leader lease"]),
  );
  expect(lines.filter((l) => l.level === "error")).toEqual([]);
  const released = await c.coordination.readNamespacedLease({ namespace: ns, name: "bpa-operator-leader" });
  expect(released.spec!.holderIdentity ?? "").toBe("");
}

describe("bpa command", () => {
  it("npm run bpa (tsx bpa/main.ts) runs the operator against a kubeconfig and stops cleanly on SIGTERM", async () => {
    await exercise([process.execPath, "--import", "tsx", "bpa/main.ts"], "bpa-cli");
  });

  it("the bundle of the image (node out/bpa/bpa.mjs) does the same", async () => {
    await exercise([bundleNode, "out/bpa/bpa.mjs"], "bpa-bundle");
  });

  it("refuses a bad configuration with every bad field named, before touching the cluster", async () => {
    const result = await run(bundleNode, ["out/bpa/bpa.mjs", "--health-port", "0"], {
      cwd: root,
      env: { PATH: process.env.PATH, BPA_RUNNER_IMAGE: "Bad Image", BPA_REGISTRY_HOST: "10.0.0.1:5000" },
    }).then(
      () => ({ code: 0, stderr: "" }),
      (error: { code: number; stderr: string }) => error,
    );
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("runnerImage (or env BPA_RUNNER_IMAGE): an image reference");
    expect(result.stderr).toContain("filesRepo (or env BPA_FILES_REPO): Required");
  });
});
