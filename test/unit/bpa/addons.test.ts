import { describe, expect, it } from "vitest";
import { resolveAddons, withDigest, type CatalogAddon } from "../../../bpa/api/addons.js";
import type { AddonStatus } from "../../../bpa/api/types.js";
import { describeAddonsPlan, planAddons } from "../../../bpa/jobs/addons-plan.js";

const CATALOG: CatalogAddon[] = [
  { name: "multus", chart: "oci://bootstrap.icn:5000/charts/multus", version: "4.3.0", namespace: "kube-system", default: true },
  {
    name: "node-feature-discovery",
    chart: "oci://bootstrap.icn:5000/charts/node-feature-discovery",
    version: "0.19.0",
    namespace: "node-feature-discovery",
    default: true,
  },
  { name: "extra", chart: "oci://bootstrap.icn:5000/charts/extra", version: "1.0.0", namespace: "extra", default: false },
];

const resolve = (raw: unknown) => {
  const r = resolveAddons(raw, CATALOG);
  if (!r.ok) throw new Error(r.errors.join("\n"));
  return r.addons;
};
const DIGEST = `sha256:${"a".repeat(64)}`;
const OTHER = `sha256:${"b".repeat(64)}`;
/** Resolved and pinned to a chart digest, as the operator plans them. */
const pinned = (raw: unknown, digest = DIGEST) => resolve(raw).map((a) => withDigest(a, digest));
const errors = (raw: unknown) => {
  const r = resolveAddons(raw, CATALOG);
  return r.ok ? [] : r.errors;
};

describe("spec.addons", () => {
  it("absent means the catalog's default set, an empty list none", () => {
    expect(resolve(undefined).map((a) => a.name)).toEqual(["multus", "node-feature-discovery"]);
    expect(resolve(null).map((a) => a.name)).toEqual(["multus", "node-feature-discovery"]);
    expect(resolve([])).toEqual([]);
  });

  it("a catalog addon by name takes its chart, version and namespace; a site's chart names its own", () => {
    const [multus, site] = resolve([
      { name: "multus", values: { image: { tag: "x" } } },
      { name: "site-app", chart: "oci://bootstrap.icn:5000/site/charts/site-app", version: "0.2.0" },
    ]);
    expect(multus).toMatchObject({
      chart: "oci://bootstrap.icn:5000/charts/multus",
      version: "4.3.0",
      namespace: "kube-system",
      values: { image: { tag: "x" } },
    });
    expect(site).toMatchObject({ chart: "oci://bootstrap.icn:5000/site/charts/site-app", version: "0.2.0", namespace: "site-app", values: {} });
  });

  it("hashes what decides the release: values in any key order hash the same, a changed value or version does not", () => {
    const [a] = resolve([{ name: "multus", values: { a: 1, b: { c: 2, d: 3 } } }]);
    const [b] = resolve([{ name: "multus", values: { b: { d: 3, c: 2 }, a: 1 } }]);
    const [c] = resolve([{ name: "multus", values: { a: 1, b: { c: 2, d: 4 } } }]);
    const [d] = resolve([{ name: "multus", version: "4.3.1", values: { a: 1, b: { c: 2, d: 3 } } }]);
    expect(a!.hash).toBe(b!.hash);
    expect(new Set([a!.hash, c!.hash, d!.hash]).size).toBe(3);
  });

  it("may name the chart's digest; another digest is another release, as another version is", () => {
    const [named] = resolve([{ name: "multus", digest: DIGEST }]);
    expect(named).toMatchObject({ version: "4.3.0", digest: DIGEST });
    const [plain] = resolve([{ name: "multus" }]);
    expect(plain!.digest).toBeUndefined();
    expect(withDigest(plain!, DIGEST).hash).toBe(named!.hash);
    expect(withDigest(plain!, OTHER).hash).not.toBe(named!.hash);
    expect(errors([{ name: "multus", digest: "4.3.0" }])).toEqual([
      'spec.addons[0].digest: expected a manifest digest such as sha256:<64 lower-case hex digits>, got "4.3.0"',
    ]);
    expect(errors([{ name: "multus", digest: `sha256:${"A".repeat(64)}` }])[0]).toMatch(/^spec\.addons\[0\]\.digest: expected a manifest digest/);
  });

  it("names each bad field and how to fix it", () => {
    expect(errors("multus")).toEqual(["spec.addons: expected a list of addons (omit it for the appliance's default set, [] for none)"]);
    expect(errors([{ name: "Multus" }])[0]).toMatch(/^spec\.addons\[0\]\.name: expected a release name/);
    expect(errors([{ name: "nope" }])).toEqual([
      "spec.addons[0]: nope is not an addon of this appliance (it serves multus, node-feature-discovery, extra); give chart and version for a chart of your own",
    ]);
    expect(errors([{ name: "app", chart: "https://example.com/app.tgz", version: "1.0.0" }])[0]).toMatch(
      /^spec\.addons\[0\]\.chart: expected an OCI chart reference/,
    );
    expect(errors([{ name: "app", chart: "oci://bootstrap.icn:5000/charts/app" }])).toEqual(["spec.addons[0].version: required with a chart of your own"]);
    expect(errors([{ name: "multus", version: "latest" }])[0]).toMatch(/^spec\.addons\[0\]\.version: expected a chart version/);
    expect(errors([{ name: "multus", namespace: "Kube_System" }])[0]).toMatch(/^spec\.addons\[0\]\.namespace: expected a namespace name/);
    expect(errors([{ name: "multus", values: [1] }])[0]).toMatch(/^spec\.addons\[0\]\.values: expected an object of Helm values/);
    expect(errors([{ name: "multus", value: {} }])[0]).toMatch(/^spec\.addons\[0\]\.value: unknown field/);
    expect(errors([{ name: "multus" }, { name: "multus" }])).toEqual(["spec.addons[1].name: multus is already spec.addons[0]; each addon once"]);
    expect(errors([{ name: "multus", values: { big: "x".repeat(70 * 1024) } }])).toEqual(["spec.addons[0].values: more than 64 KiB"]);
  });
});

describe("the addons plan", () => {
  const status = (name: string, hash: string, state: AddonStatus["state"], retryToken?: string): AddonStatus => ({
    name,
    chart: `oci://bootstrap.icn:5000/charts/${name}`,
    version: "1.0.0",
    namespace: name,
    hash,
    state,
    ...(retryToken !== undefined ? { retryToken } : {}),
  });

  it("installs what is new, upgrades what changed, uninstalls what is gone, and keeps what is installed", () => {
    const [multus, nfd] = pinned(undefined);
    const plan = planAddons(
      [multus!, nfd!],
      [status("multus", multus!.hash, "Installed"), status("node-feature-discovery", "old", "Installed"), status("gone", "h", "Installed")],
    );
    expect(plan.apply.map((a) => a.name)).toEqual(["node-feature-discovery"]);
    expect(plan.remove.map((a) => a.name)).toEqual(["gone"]);
    expect(describeAddonsPlan(plan, [status("node-feature-discovery", "old", "Installed"), status("gone", "h", "Installed")])).toBe(
      "upgrade node-feature-discovery 0.19.0, uninstall gone",
    );
    const first = planAddons([multus!, nfd!], []);
    expect(describeAddonsPlan(first, [])).toBe("install multus 4.3.0, install node-feature-discovery 0.19.0");
    expect(planAddons([multus!], [status("multus", multus!.hash, "Installed")])).toEqual({ apply: [], remove: [], failed: [] });
  });

  it("leaves a failed addon alone until it changes or the retry annotation does", () => {
    const [multus] = pinned([{ name: "multus" }]);
    const failed = status("multus", multus!.hash, "Failed", "");
    expect(planAddons([multus!], [failed], "")).toMatchObject({ apply: [], failed: [failed] });
    expect(planAddons([multus!], [failed], "again").apply.map((a) => a.name)).toEqual(["multus"]);
    const [changed] = pinned([{ name: "multus", values: { fixed: true } }]);
    expect(planAddons([changed!], [failed], "").apply.map((a) => a.name)).toEqual(["multus"]);
    // A failed uninstall waits for the annotation too.
    const stuck = status("gone", "h", "Failed", "t1");
    expect(planAddons([], [stuck], "t1")).toMatchObject({ remove: [], failed: [stuck] });
    expect(planAddons([], [stuck], "t2").remove).toEqual([stuck]);
  });

  it("a Job that did not finish (Pending, Installing, Removing) is planned again", () => {
    const [multus] = pinned([{ name: "multus" }]);
    expect(planAddons([multus!], [status("multus", multus!.hash, "Installing")]).apply).toHaveLength(1);
    expect(planAddons([], [status("gone", "h", "Removing")]).remove).toHaveLength(1);
  });

  it("another chart digest under the same version is an upgrade", () => {
    const [multus] = pinned([{ name: "multus" }]);
    const [moved] = pinned([{ name: "multus" }], OTHER);
    expect(planAddons([moved!], [status("multus", multus!.hash, "Installed")]).apply).toEqual([moved]);
  });
});
