/**
 * spec.addons: what the BPA installs into an application cluster once it is Ready (Helm
 * charts stored as OCI artifacts in the appliance's registry). Absent: the addons the
 * appliance's catalog marks as defaults (the ICN set); an empty list: none. An entry names
 * an addon of the catalog (its chart and version by default) or a chart of the site's own
 * (`chart: oci://…` and `version`), with the release's namespace and Helm values. The chart
 * is installed by its manifest digest: the one an entry names (`digest`), else the one the
 * operator records when it first resolves the version's tag (bpa/controller/addon-digests.ts).
 *
 * A bad entry never touches the cluster: the operator reports it in the AddonsReady
 * condition, naming the field, and installs nothing until it is fixed.
 */
import { createHash } from "node:crypto";
import type { CatalogAddon } from "../../common/addons-catalog.js";

export type { CatalogAddon };

/** One entry of spec.addons as users write it. */
export interface AddonEntry {
  /** The Helm release's name; for a catalog addon also the addon's name (multus, node-feature-discovery, …). */
  name: string;
  /** An OCI chart reference (oci://registry/path); default: the catalog's chart of that name. */
  chart?: string;
  /** The chart's version; default: the catalog's. Required with a chart of the site's own. */
  version?: string;
  /** The release's namespace; default: the catalog's, or the addon's name. */
  namespace?: string;
  /** Helm values. */
  values?: Record<string, unknown>;
  /** The chart's manifest digest (sha256:…) to install; default: what the version's tag names when the operator first resolves it. */
  digest?: string;
}

/** An addon as the operator installs it: every default applied. */
export interface ResolvedAddon {
  name: string;
  chart: string;
  version: string;
  namespace: string;
  values: Record<string, unknown>;
  /** The chart's manifest digest: named in spec.addons, or pinned by the operator (withDigest). */
  digest?: string;
  /** sha256 of chart, version, digest, namespace and values: a change is an upgrade. */
  hash: string;
}

/** An addon with the chart digest it installs. */
export type PinnedAddon = ResolvedAddon & { digest: string };

export type AddonsResult = { ok: true; addons: ResolvedAddon[] } | { ok: false; errors: string[] };

/** Helm's limit for a release name, and a DNS label as Kubernetes names go. */
const RELEASE_NAME = /^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$/;
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const OCI_CHART = /^oci:\/\/[a-z0-9.-]+(:\d{1,5})?(\/[a-z0-9._-]+)+$/;
/** Semantic versions as Helm charts carry them (1.2.3, v4.3.0, 0.19.0-rc.1+build). */
const CHART_VERSION = /^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]+)?$/;
/** An OCI manifest digest as Helm pulls by it (oci://host/repo@sha256:…). */
export const CHART_DIGEST = /^sha256:[0-9a-f]{64}$/;
const ENTRY_KEYS = new Set(["name", "chart", "version", "namespace", "values", "digest"]);
export const MAX_ADDONS = 50;
/** The values of one addon, as JSON: they travel in a ConfigMap with the others. */
export const MAX_VALUES_BYTES = 64 * 1024;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function addonHash(a: Omit<ResolvedAddon, "hash">): string {
  return createHash("sha256")
    .update(JSON.stringify([a.chart, a.version, a.digest ?? null, a.namespace, canonical(a.values)]))
    .digest("hex");
}

/** Keys sorted at every level: the same values hash the same however they were written. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (isObject(value))
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canonical(value[k])]),
    );
  return value;
}

/** The addons a Provisioning asks for, resolved against the appliance's catalog. */
export function resolveAddons(raw: unknown, catalog: readonly CatalogAddon[]): AddonsResult {
  if (raw === undefined || raw === null) {
    return {
      ok: true,
      addons: catalog.filter((a) => a.default).map((a) => resolved({ name: a.name, chart: a.chart, version: a.version, namespace: a.namespace, values: {} })),
    };
  }
  if (!Array.isArray(raw)) return { ok: false, errors: ["spec.addons: expected a list of addons (omit it for the appliance's default set, [] for none)"] };
  if (raw.length > MAX_ADDONS) return { ok: false, errors: [`spec.addons: ${raw.length} entries, at most ${MAX_ADDONS} are allowed`] };
  const errors: string[] = [];
  const addons: ResolvedAddon[] = [];
  const seen = new Map<string, number>();
  raw.forEach((entry, i) => {
    const path = `spec.addons[${i}]`;
    const before = errors.length;
    if (!isObject(entry)) {
      errors.push(`${path}: expected an object with a name, got ${JSON.stringify(entry)}`);
      return;
    }
    for (const key of Object.keys(entry)) if (!ENTRY_KEYS.has(key)) errors.push(`${path}.${key}: unknown field (an addon has ${[...ENTRY_KEYS].join(", ")})`);
    const name = entry.name;
    if (typeof name !== "string" || !RELEASE_NAME.test(name)) {
      errors.push(`${path}.name: expected a release name (lower-case letters, digits and '-', at most 53 characters), got ${JSON.stringify(name)}`);
      return;
    }
    const other = seen.get(name);
    if (other !== undefined) errors.push(`${path}.name: ${name} is already spec.addons[${other}]; each addon once`);
    seen.set(name, i);
    const known = catalog.find((a) => a.name === name);
    const chart = optionalString(entry, "chart", path, errors);
    const version = optionalString(entry, "version", path, errors);
    const namespace = optionalString(entry, "namespace", path, errors);
    const digest = optionalString(entry, "digest", path, errors);
    if (chart !== undefined && !OCI_CHART.test(chart))
      errors.push(`${path}.chart: expected an OCI chart reference such as oci://bootstrap.icn:5000/charts/${name}, got ${JSON.stringify(chart)}`);
    if (version !== undefined && !CHART_VERSION.test(version))
      errors.push(`${path}.version: expected a chart version such as 1.2.3, got ${JSON.stringify(version)}`);
    if (namespace !== undefined && !NAMESPACE.test(namespace)) errors.push(`${path}.namespace: expected a namespace name, got ${JSON.stringify(namespace)}`);
    if (digest !== undefined && !CHART_DIGEST.test(digest))
      errors.push(`${path}.digest: expected a manifest digest such as sha256:<64 lower-case hex digits>, got ${JSON.stringify(digest)}`);
    if (chart === undefined && !known) {
      const names = catalog.map((a) => a.name).join(", ") || "none";
      errors.push(`${path}: ${name} is not an addon of this appliance (it serves ${names}); give chart and version for a chart of your own`);
    }
    if (chart !== undefined && version === undefined && chart !== known?.chart) errors.push(`${path}.version: required with a chart of your own`);
    const values = entry.values ?? {};
    if (!isObject(values)) errors.push(`${path}.values: expected an object of Helm values, got ${JSON.stringify(values)}`);
    else if (Buffer.byteLength(JSON.stringify(values)) > MAX_VALUES_BYTES) errors.push(`${path}.values: more than ${MAX_VALUES_BYTES / 1024} KiB`);
    if (errors.length > before) return;
    addons.push(
      resolved({
        name,
        chart: chart ?? known!.chart,
        version: version ?? known!.version,
        namespace: namespace ?? known?.namespace ?? name,
        values: values as Record<string, unknown>,
        ...(digest !== undefined ? { digest } : {}),
      }),
    );
  });
  return errors.length ? { ok: false, errors } : { ok: true, addons };
}

function optionalString(entry: Record<string, unknown>, key: string, path: string, errors: string[]): string | undefined {
  const value = entry[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string" && value.length > 0) return value;
  errors.push(`${path}.${key}: expected a string, got ${JSON.stringify(value)}`);
  return undefined;
}

function resolved(a: Omit<ResolvedAddon, "hash">): ResolvedAddon {
  return { ...a, hash: addonHash(a) };
}

/** The addon installing this chart digest (its hash covers the digest: another digest is an upgrade). */
export function withDigest(a: ResolvedAddon, digest: string): PinnedAddon {
  const pinned = { ...a, digest };
  return { ...pinned, hash: addonHash(pinned) };
}

/** The tag Helm stores a chart version under: OCI tags have no '+', Helm writes '_' for it. */
export const chartTag = (version: string) => version.replaceAll("+", "_");
