/**
 * Validation and normalisation of a Provisioning's spec. The CRD schema cannot type
 * `master` and `worker` (they are either one object, as in seed 002's sample, or a list),
 * so their content is checked here, with messages that name the field.
 */
import { createHash } from "node:crypto";
import { QuantityError, formatBytes, parseQuantityBytes } from "./quantity.js";
import type { ProvisioningSpec, Role } from "./types.js";

/** One role to fill: the resolved requirements of one entry of spec.master[] / spec.worker[]. */
export interface RoleRequirement {
  role: Role;
  index: number;
  cpu: number;
  memoryBytes: number;
  sriov: boolean;
  qat: boolean;
  /** Lower-case MAC this role is pinned to, if any. */
  mac?: string;
}

export interface NormalizedSpec {
  masters: RoleRequirement[];
  workers: RoleRequirement[];
  replicas: number;
  /** The application cluster's Kubernetes version ("1.35.4"), when the spec names one. */
  kubernetesVersion?: string;
}

export interface SpecOptions {
  /** The Kubernetes versions the appliance serves (BPA configuration kubernetesVersions); unset: not checked here. */
  servedVersions?: readonly string[];
  /** Why a number of nodes does not fit the clusters' pod network (bpa/inventory/pod-network.ts); unset: not checked here. */
  nodesTooMany?: (count: number) => string | undefined;
}

const KUBERNETES_VERSION = /^v?(\d+\.\d+\.\d+)$/;

export type SpecResult = { ok: true; spec: NormalizedSpec } | { ok: false; errors: string[] };

export const MAC_PATTERN = /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/;
/** Guards against a typo creating a huge matching problem. */
export const MAX_ENTRIES = 1000;
export const MAX_REPLICAS = 100;

const MASTER_KEYS = new Set(["cpu", "memory", "mac"]);
const WORKER_KEYS = new Set(["cpu", "memory", "mac", "sriov", "qat"]);

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function entries(value: unknown, field: string, errors: string[]): Record<string, unknown>[] {
  if (value === undefined || value === null) return [];
  if (isPlainObject(value)) return [value];
  if (Array.isArray(value)) {
    if (value.length > MAX_ENTRIES) {
      errors.push(`spec.${field}: ${value.length} entries, at most ${MAX_ENTRIES} are allowed`);
      return [];
    }
    const out: Record<string, unknown>[] = [];
    value.forEach((item, i) => {
      if (isPlainObject(item)) out.push(item);
      else errors.push(`spec.${field}[${i}]: expected an object with cpu and memory, got ${describe(item)}`);
    });
    return errors.length ? [] : out;
  }
  errors.push(`spec.${field}: expected an object or a list of objects, got ${describe(value)}`);
  return [];
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "string") return `the string ${JSON.stringify(value)}`;
  return `${typeof value} ${JSON.stringify(value)}`;
}

function requirement(entry: Record<string, unknown>, role: Role, index: number, path: string, errors: string[]): RoleRequirement | undefined {
  const allowed = role === "master" ? MASTER_KEYS : WORKER_KEYS;
  const before = errors.length;
  for (const key of Object.keys(entry)) {
    if (!allowed.has(key)) {
      errors.push(`${path}.${key}: unknown field (a ${role} accepts ${[...allowed].join(", ")})`);
    }
  }
  let cpu = 0;
  if (entry.cpu !== undefined) {
    if (typeof entry.cpu === "number" && Number.isInteger(entry.cpu) && entry.cpu >= 0 && entry.cpu <= 1_000_000) cpu = entry.cpu;
    else errors.push(`${path}.cpu: expected a whole number of CPUs >= 0, got ${describe(entry.cpu)}`);
  }
  let memoryBytes = 0;
  if (entry.memory !== undefined) {
    if (typeof entry.memory === "string" || typeof entry.memory === "number") {
      try {
        memoryBytes = parseQuantityBytes(entry.memory);
      } catch (error) {
        errors.push(`${path}.memory: ${error instanceof QuantityError ? error.message : String(error)}`);
      }
    } else {
      errors.push(`${path}.memory: expected a quantity such as 4Gi, got ${describe(entry.memory)}`);
    }
  }
  const flag = (key: "sriov" | "qat"): boolean => {
    const value = entry[key];
    if (value === undefined) return false;
    if (typeof value === "boolean") return value;
    errors.push(`${path}.${key}: expected true or false, got ${describe(value)}`);
    return false;
  };
  const sriov = role === "worker" ? flag("sriov") : false;
  const qat = role === "worker" ? flag("qat") : false;
  let mac: string | undefined;
  if (entry.mac !== undefined) {
    if (typeof entry.mac === "string" && MAC_PATTERN.test(entry.mac)) mac = entry.mac.toLowerCase();
    else errors.push(`${path}.mac: expected a MAC address like 52:54:00:12:34:56, got ${describe(entry.mac)}`);
  }
  if (errors.length > before) return undefined;
  return { role, index, cpu, memoryBytes, sriov, qat, ...(mac ? { mac } : {}) };
}

/** Validates a spec as stored by the API server and resolves it to role requirements. */
export function normalizeSpec(raw: unknown, options: SpecOptions = {}): SpecResult {
  const errors: string[] = [];
  if (raw !== undefined && raw !== null && !isPlainObject(raw)) {
    return { ok: false, errors: [`spec: expected an object, got ${describe(raw)}`] };
  }
  const spec = (raw ?? {}) as ProvisioningSpec & Record<string, unknown>;
  for (const key of Object.keys(spec)) {
    // spec.addons is resolved apart (bpa/api/addons.ts): a bad addon never holds up the cluster.
    if (!["master", "worker", "replicas", "kubernetesVersion", "addons"].includes(key)) errors.push(`spec.${key}: unknown field`);
  }
  const masterEntries = entries(spec.master, "master", errors);
  const workerEntries = entries(spec.worker, "worker", errors);
  const masterPath = (i: number) => (Array.isArray(spec.master) ? `spec.master[${i}]` : "spec.master");
  const workerPath = (i: number) => (Array.isArray(spec.worker) ? `spec.worker[${i}]` : "spec.worker");
  const masters = masterEntries.map((e, i) => requirement(e, "master", i, masterPath(i), errors));
  const workers = workerEntries.map((e, i) => requirement(e, "worker", i, workerPath(i), errors));
  if (masterEntries.length === 0 && !errors.some((e) => e.startsWith("spec.master"))) {
    errors.push("spec.master: at least one master is required (kubespray needs a control plane)");
  }
  const nodes = masterEntries.length + workerEntries.length;
  if (nodes > MAX_ENTRIES) errors.push(`spec: ${nodes} roles, at most ${MAX_ENTRIES} are allowed`);
  else {
    const tooMany = options.nodesTooMany?.(nodes);
    if (tooMany) errors.push(`spec: ${tooMany}`);
  }
  let replicas = 0;
  if (spec.replicas !== undefined && spec.replicas !== null) {
    const r = spec.replicas as unknown;
    if (typeof r === "number" && Number.isInteger(r) && r >= 0 && r <= MAX_REPLICAS) replicas = r;
    else errors.push(`spec.replicas: expected a whole number from 0 to ${MAX_REPLICAS}, got ${describe(r)}`);
  }
  const kubernetesVersion = version(spec.kubernetesVersion, options.servedVersions, errors);
  const all = [...masters, ...workers].filter((r): r is RoleRequirement => r !== undefined);
  const pins = new Map<string, string>();
  for (const r of all) {
    if (!r.mac) continue;
    const here = `spec.${r.role}[${r.index}]`;
    const other = pins.get(r.mac);
    if (other) errors.push(`${here}.mac: ${r.mac} is already pinned by ${other}; one host cannot take two roles`);
    else pins.set(r.mac, here);
  }
  if (errors.length) return { ok: false, errors };
  return {
    ok: true,
    spec: {
      masters: masters as RoleRequirement[],
      workers: workers as RoleRequirement[],
      replicas,
      ...(kubernetesVersion ? { kubernetesVersion } : {}),
    },
  };
}

/** spec.kubernetesVersion: "1.35.4" or "v1.35.4", and one the appliance serves. */
function version(raw: unknown, served: readonly string[] | undefined, errors: string[]): string | undefined {
  if (raw === undefined || raw === null) return undefined;
  const m = typeof raw === "string" ? KUBERNETES_VERSION.exec(raw) : null;
  if (!m) {
    errors.push(`spec.kubernetesVersion: expected a Kubernetes version such as 1.35.4, got ${describe(raw)}`);
    return undefined;
  }
  if (served?.length && !served.includes(m[1]!)) {
    errors.push(`spec.kubernetesVersion: ${m[1]} is not served by this appliance; it serves ${served.join(", ")} (omit the field for the newest)`);
    return undefined;
  }
  return m[1];
}

/** A role's label for messages and status: master[0], worker[2]. */
export function roleLabel(r: Pick<RoleRequirement, "role" | "index">): string {
  return `${r.role}[${r.index}]`;
}

/** "cpu>=20, memory>=8Gi, sriov, mac=..." */
export function describeRequirement(r: RoleRequirement): string {
  const parts = [`cpu>=${r.cpu}`, `memory>=${formatBytes(r.memoryBytes)}`];
  if (r.sriov) parts.push("sriov");
  if (r.qat) parts.push("qat");
  if (r.mac) parts.push(`mac=${r.mac}`);
  return parts.join(", ");
}

/** Stable hash of the resolved spec: equal for "4Gi" and "4096Mi", for an object and a list of one. */
export function specHash(spec: NormalizedSpec): string {
  const canonical = {
    masters: spec.masters.map(canonicalRole),
    workers: spec.workers.map(canonicalRole),
    // Only when named, so that the hashes of specs without it stay as they were.
    ...(spec.kubernetesVersion ? { kubernetesVersion: spec.kubernetesVersion } : {}),
  };
  return createHash("sha256").update(JSON.stringify(canonical)).digest("hex");
}

function canonicalRole(r: RoleRequirement) {
  return [r.role, r.index, r.cpu, r.memoryBytes, r.sriov, r.qat, r.mac ?? ""];
}

export function allRoles(spec: NormalizedSpec): RoleRequirement[] {
  return [...spec.masters, ...spec.workers];
}
