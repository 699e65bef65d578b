import type { V1Job } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import type { CatalogAddon } from "../../../common/addons-catalog.js";
import type { AddonStatus, Provisioning } from "../../../bpa/api/types.js";
import { decideAddons, type AddonsInput } from "../../../bpa/controller/addons.js";
import { addonsJob, addonsNames, addonsPlanConfigMap } from "../../../bpa/jobs/addons-objects.js";
import { tagKey, type TagLookup } from "../../../bpa/controller/chart-registry.js";
import { parseConfig } from "../../../bpa/config/config.js";

const CATALOG: CatalogAddon[] = [
  { name: "multus", chart: "oci://bootstrap.icn:5000/charts/multus", version: "4.3.0", namespace: "kube-system", default: true },
  { name: "node-feature-discovery", chart: "oci://bootstrap.icn:5000/charts/node-feature-discovery", version: "0.19.0", namespace: "nfd", default: true },
];
const NOW = new Date("2026-11-27T12:00:00Z");
const digest = (c: string) => `sha256:${c.repeat(64)}`;
/** What the registry's tags name: each catalog chart's version. */
const TAGS = new Map<string, TagLookup>([
  [tagKey(CATALOG[0]!.chart, "4.3.0"), { digest: digest("1") }],
  [tagKey(CATALOG[1]!.chart, "0.19.0"), { digest: digest("2") }],
]);
const config = parseConfig(
  {
    runnerImage: "bootstrap.icn:5000/icn/kubespray-runner:v2.31.0",
    registryHost: "bootstrap.icn:5000",
    filesRepo: "http://bootstrap.icn:8080/kubespray",
    addonsRegistryIP: "10.0.0.1",
  },
  "test",
);

function provisioning(spec: Provisioning["spec"] = {}, addons?: AddonStatus[], retry?: string): Provisioning {
  return {
    metadata: { name: "site", namespace: "team-a", uid: "u1", ...(retry ? { annotations: { "bpa.akraino.org/retry": retry } } : {}) },
    spec: { master: { cpu: 2, memory: "2Gi" }, ...spec },
    status: { phase: "Ready", ...(addons ? { addons } : {}) },
  };
}

const input = (p: Provisioning, over: Partial<AddonsInput> = {}): AddonsInput => ({
  p,
  catalog: CATALOG,
  registryCaPem: "CA",
  jobs: [],
  results: {},
  tags: TAGS,
  clusterReady: true,
  logsHint: (job) => `logs: kubectl -n team-a logs job/${job.metadata!.name}`,
  now: NOW,
  ...over,
});

/** The Job the operator would have made for the decision's plan, with the given state. */
function jobFor(p: Provisioning, start: NonNullable<ReturnType<typeof decideAddons>["start"]>, state: "running" | "succeeded" | "failed"): V1Job {
  const job = addonsJob(p, config, start.hash, start.plan, start.record);
  job.metadata!.creationTimestamp = NOW;
  const conditions =
    state === "running"
      ? []
      : [{ type: state === "succeeded" ? "Complete" : "Failed", status: "True", reason: state === "failed" ? "BackoffLimitExceeded" : undefined }];
  job.status = state === "running" ? { active: 1 } : { conditions: conditions as never };
  return job;
}

describe("the addons step's decision", () => {
  it("on a fresh cluster starts one Job for the default set, marked Pending, with the chart's registry name mapped for the pod", () => {
    const d = decideAddons(input(provisioning()));
    expect(d.start?.summary).toBe("install multus 4.3.0, install node-feature-discovery 0.19.0");
    expect(d.addons.map((a) => [a.name, a.state])).toEqual([
      ["multus", "Pending"],
      ["node-feature-discovery", "Pending"],
    ]);
    expect(d.condition).toMatchObject({ type: "AddonsReady", status: "False", reason: "Installing" });
    const job = addonsJob(provisioning(), config, d.start!.hash, d.start!.plan, d.start!.record);
    expect(job.metadata!.name).toBe(addonsNames(provisioning(), d.start!.hash).job);
    expect(job.spec!.template.spec!.hostAliases).toEqual([{ ip: "10.0.0.1", hostnames: ["bootstrap.icn"] }]);
    expect(job.spec!.template.spec!.serviceAccountName).toBe("site-runner");
  });

  it("waits for an installed cluster no operation is changing", () => {
    const d = decideAddons(input(provisioning(), { clusterReady: false }));
    expect(d.start).toBeUndefined();
    expect(d.condition).toMatchObject({ status: "Unknown", reason: "WaitingForCluster" });
  });

  it("follows the runner's results while its Job runs, then reports every addon Installed and AddonsReady True", () => {
    const p = provisioning();
    const start = decideAddons(input(p)).start!;
    const name = addonsNames(p, start.hash).job!;
    const running = decideAddons(input(p, { jobs: [jobFor(p, start, "running")], results: { multus: JSON.stringify({ job: name, state: "Installed" }) } }));
    expect(running.addons.map((a) => [a.name, a.state])).toEqual([
      ["multus", "Installed"],
      ["node-feature-discovery", "Installing"],
    ]);
    expect(running.condition).toMatchObject({ status: "False", reason: "Installing", message: `addons Job ${name}: installing node-feature-discovery` });
    expect(running.start).toBeUndefined();
    const results = { multus: JSON.stringify({ job: name, state: "Installed" }), "node-feature-discovery": JSON.stringify({ job: name, state: "Installed" }) };
    const done = decideAddons(input({ ...p, status: { ...p.status, addons: running.addons } }, { jobs: [jobFor(p, start, "succeeded")], results }));
    expect(done.addons.every((a) => a.state === "Installed")).toBe(true);
    expect(done.condition).toMatchObject({ status: "True", reason: "Installed", message: "installed: multus 4.3.0, node-feature-discovery 0.19.0" });
    expect(done.events).toEqual([{ type: "Normal", reason: "AddonInstalled", message: "node-feature-discovery 0.19.0 installed in namespace nfd" }]);
    expect(done.start).toBeUndefined();
  });

  it("a failed addon: AddonsReady False with Helm's words and the retry path, the cluster untouched, retried only by the annotation", () => {
    const p = provisioning({ addons: [{ name: "multus" }] });
    const start = decideAddons(input(p)).start!;
    const name = addonsNames(p, start.hash).job!;
    const results = { multus: JSON.stringify({ job: name, state: "Failed", message: "Error: INSTALLATION FAILED: context deadline exceeded" }) };
    const failed = decideAddons(input(p, { jobs: [jobFor(p, start, "failed")], results }));
    expect(failed.addons).toMatchObject([
      { name: "multus", state: "Failed", message: "Error: INSTALLATION FAILED: context deadline exceeded", retryToken: "" },
    ]);
    expect(failed.condition).toMatchObject({ status: "False", reason: "AddonsFailed" });
    expect(failed.condition.message).toContain("bpa.akraino.org/retry");
    expect(failed.events).toMatchObject([{ type: "Warning", reason: "AddonFailed" }]);
    expect(failed.start).toBeUndefined();
    const retried = decideAddons(
      input(provisioning({ addons: [{ name: "multus" }] }, failed.addons, "again"), { jobs: [jobFor(p, start, "failed")], results }),
    );
    expect(retried.start?.summary).toBe("upgrade multus 4.3.0");
  });

  it("the newest Job is the one made last, to the millisecond (creationTimestamp has whole seconds)", () => {
    const p = provisioning({ addons: [{ name: "multus" }] });
    const start = decideAddons(input(p)).start!;
    const first = jobFor(p, { ...start, record: { ...start.record, createdMs: NOW.getTime() } }, "succeeded");
    const [changed] = [provisioning({ addons: [{ name: "multus", values: { a: 1 } }] })];
    const next = decideAddons(input(changed!)).start!;
    const second = jobFor(changed!, { ...next, record: { ...next.record, createdMs: NOW.getTime() + 400 } }, "running");
    for (const jobs of [
      [first, second],
      [second, first],
    ]) {
      const d = decideAddons(input(changed!, { jobs }));
      expect(d.condition).toMatchObject({ reason: "Installing", message: `addons Job ${second.metadata!.name}: installing multus` });
    }
  });

  it("a Job that ended before the runner got to an addon fails that addon, naming the Job's logs", () => {
    const p = provisioning({ addons: [{ name: "multus" }] });
    const start = decideAddons(input(p)).start!;
    const d = decideAddons(input(p, { jobs: [jobFor(p, start, "failed")] }));
    expect(d.addons[0]).toMatchObject({ state: "Failed" });
    expect(d.addons[0]!.message).toMatch(
      /^the addons Job site-addons-[0-9a-f]{8} ended \(BackoffLimitExceeded\) before it got to multus; logs: kubectl -n team-a logs job\//,
    );
  });

  it("day 2: changed values upgrade, a removed addon is uninstalled and leaves status", () => {
    const installed: AddonStatus[] = decideAddons(input(provisioning())).addons.map((a) => ({ ...a, state: "Installed" }));
    const p = provisioning({ addons: [{ name: "multus", values: { logLevel: "debug" } }] }, installed);
    const d = decideAddons(input(p));
    expect(d.start?.summary).toBe("upgrade multus 4.3.0, uninstall node-feature-discovery");
    const name = addonsNames(p, d.start!.hash).job!;
    const results = {
      multus: JSON.stringify({ job: name, state: "Installed" }),
      "node-feature-discovery": JSON.stringify({ job: name, state: "Uninstalled" }),
    };
    const done = decideAddons(input({ ...p, status: { ...p.status, addons: d.addons } }, { jobs: [jobFor(p, d.start!, "succeeded")], results }));
    expect(done.addons.map((a) => [a.name, a.state])).toEqual([["multus", "Installed"]]);
    expect(done.events.map((e) => e.reason).sort()).toEqual(["AddonInstalled", "AddonRemoved"]);
    expect(done.condition).toMatchObject({ status: "True" });
  });

  it("an invalid spec.addons changes nothing and says which field; results of another Job are not taken", () => {
    const p = provisioning({ addons: [{ name: "nope" }] }, [
      { name: "multus", chart: "c", version: "1.0.0", namespace: "kube-system", hash: "h", state: "Installed" },
    ]);
    const d = decideAddons(input(p, { results: { multus: JSON.stringify({ job: "someone-else", state: "Failed" }) } }));
    expect(d.start).toBeUndefined();
    expect(d.addons).toEqual(p.status!.addons);
    expect(d.condition).toMatchObject({ status: "False", reason: "InvalidAddons" });
    expect(d.condition.message).toContain("spec.addons[0]: nope is not an addon of this appliance");
  });

  it("an appliance without a catalog: no default addons, and AddonsReady says why", () => {
    const d = decideAddons(input(provisioning(), { catalog: { missing: "this appliance serves no addons: ConfigMap bpa-system/bpa-addons not found" } }));
    expect(d.start).toBeUndefined();
    expect(d.condition).toMatchObject({
      status: "True",
      reason: "Installed",
      message: "no addons asked for (this appliance serves no addons: ConfigMap bpa-system/bpa-addons not found)",
    });
  });

  it("pins each chart to the digest its tag names: the plan and status.addons carry it, Helm gets chart@digest", () => {
    const p = provisioning();
    const d = decideAddons(input(p));
    expect(d.addons.map((a) => [a.name, a.digest])).toEqual([
      ["multus", digest("1")],
      ["node-feature-discovery", digest("2")],
    ]);
    const plan = JSON.parse(addonsPlanConfigMap(p, d.start!.hash, d.start!.plan, "CA").data!["plan.json"]!);
    expect(plan.apply.map((a: { name: string; chart: string; digest: string }) => [a.name, `${a.chart}@${a.digest}`])).toEqual([
      ["multus", `oci://bootstrap.icn:5000/charts/multus@${digest("1")}`],
      ["node-feature-discovery", `oci://bootstrap.icn:5000/charts/node-feature-discovery@${digest("2")}`],
    ]);
    expect(d.start!.record.entries.map((e) => e.digest)).toEqual([digest("1"), digest("2")]);
  });

  it("a tag moved under a recorded digest: the recorded one stays, status shows the tag's, AddonsReady and one Event say it", () => {
    const p = provisioning({ addons: [{ name: "multus" }] });
    const installed = decideAddons(input(p)).addons.map((a) => ({ ...a, state: "Installed" as const }));
    const moved = new Map(TAGS).set(tagKey(CATALOG[0]!.chart, "4.3.0"), { digest: digest("9") });
    const d = decideAddons(input(provisioning({ addons: [{ name: "multus" }] }, installed), { tags: moved }));
    expect(d.start).toBeUndefined();
    expect(d.addons).toMatchObject([{ name: "multus", state: "Installed", digest: digest("1"), tagDigest: digest("9") }]);
    expect(d.condition).toMatchObject({ type: "AddonsReady", status: "True", reason: "AddonTagMoved" });
    const said = `multus: bootstrap.icn:5000/charts/multus:4.3.0 now names ${digest("9")}; the addon keeps ${digest("1")}`;
    expect(d.condition.message).toContain(said);
    expect(d.events).toEqual([{ type: "Warning", reason: "AddonTagMoved", message: expect.stringContaining(said) }]);
    // Said once; when the tag names the recorded digest again, status says so.
    const again = decideAddons(input(provisioning({ addons: [{ name: "multus" }] }, d.addons), { tags: moved }));
    expect(again.events).toEqual([]);
    expect(again.start).toBeUndefined();
    const back = decideAddons(input(provisioning({ addons: [{ name: "multus" }] }, d.addons)));
    expect(back.addons[0]!.tagDigest).toBeUndefined();
    expect(back.condition).toMatchObject({ status: "True", reason: "Installed" });
    // Other values upgrade the addon with the recorded digest, not the tag's.
    const changed = decideAddons(input(provisioning({ addons: [{ name: "multus", values: { a: 1 } }] }, d.addons), { tags: moved }));
    expect(changed.start!.plan.apply.map((a) => a.digest)).toEqual([digest("1")]);
  });

  it("a digest named in spec.addons is what is installed; a tag naming another is reported", () => {
    const installed = decideAddons(input(provisioning({ addons: [{ name: "multus" }] }))).addons.map((a) => ({ ...a, state: "Installed" as const }));
    const d = decideAddons(input(provisioning({ addons: [{ name: "multus", digest: digest("7") }] }, installed)));
    expect(d.start?.summary).toBe("upgrade multus 4.3.0");
    expect(d.start!.plan.apply.map((a) => a.digest)).toEqual([digest("7")]);
    expect(d.addons).toMatchObject([{ name: "multus", state: "Pending", digest: digest("7"), tagDigest: digest("1") }]);
    expect(d.events.map((e) => e.reason)).toEqual(["AddonTagMoved"]);
  });

  it("a chart version whose digest cannot be read: nothing starts, AddonsReady names it and the registry's answer", () => {
    const tags = new Map(TAGS).set(tagKey(CATALOG[1]!.chart, "0.19.0"), {
      missing: "bootstrap.icn:5000/charts/node-feature-discovery:0.19.0 is not in the registry",
    });
    const d = decideAddons(input(provisioning(), { tags }));
    expect(d.start).toBeUndefined();
    expect(d.condition).toMatchObject({ status: "False", reason: "ChartUnresolved" });
    expect(d.condition.message).toContain("node-feature-discovery's chart bootstrap.icn:5000/charts/node-feature-discovery:0.19.0 (");
    expect(d.events.map((e) => e.reason)).toEqual(["ChartUnresolved"]);
  });
});
