import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import yaml from "js-yaml";
import { cacheRoot, ContentStore, sha256Text, tempSibling } from "../cache.js";
import { indexReports } from "../check/go-vulns.js";
import { GoVulndbPin, pinnedGoVulndb, readGoVulndb, VULNDB_MODULE } from "../check/vulndb.js";
import { UserError } from "../errors.js";
import { OFFLINE_GROUPS } from "../kubespray/components.js";
import { ADDON_GROUPS } from "../addons/components.js";
import { METAL3_GROUPS } from "../metal3/components.js";
import { TOOL_GROUPS } from "./tool-groups.js";
import { APPLIANCE_GROUPS } from "./appliance-groups.js";
import { DEFAULT_LOCK } from "../lockfile.js";
import { log as defaultLog } from "../log.js";
import { compareVersions } from "../check/versions.js";
import { classifyGoFailure, compareGoVersions, goDirective, runGo, runGoRaw } from "./go.js";
import type { GroupSpec } from "./group-spec.js";
import { raiseHeader, raiseVulnerableDependencies, type Advisories } from "./security-raises.js";
import { Artifacts, type ArtifactEntry, type GoModArtifact } from "./schema.js";

export interface LockContext {
  goEnv?: Record<string, string | undefined>;
  log?: (scope: string, message: string) => void;
  /** The Go vulnerability database: reported dependencies with a fix are raised in each wrapper. */
  advisories?: Advisories;
}

/** Kubernetes binaries built from k8s.io/kubernetes, by name. */
export const KUBERNETES_BINARIES = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubeadm", "kubectl", "kube-proxy"] as const;

/**
 * A Kubernetes version served besides the lock's (for clusters to be installed at one and
 * upgraded to another) is its own entry, kubernetes-<version>, whose binaries carry the
 * version in their names: artifact names are global (kube-apiserver is the lock's version).
 */
export const extraKubernetesGroup = (version: string) => `kubernetes-${version}`;
export const versionedBinary = (binary: string, version: string) => `${binary}-${version}`;

/** The group of an extra served Kubernetes version (no etcd or CoreDNS: the lock's serve every version). */
export function extraKubernetesGroupSpec(version: string): GroupSpec {
  return {
    name: extraKubernetesGroup(version),
    module: "k8s.io/kubernetes",
    version,
    binaries: Object.fromEntries(KUBERNETES_BINARIES.map((b) => [versionedBinary(b, version), `k8s.io/kubernetes/cmd/${b}`])),
    replaces: (goMod) => kubernetesStagingReplaces(goMod, version),
    note: "served besides the lock's Kubernetes version, for upgrades",
  };
}

/** Downloads a module version (verified by Go against the checksum database or GONOSUMDB policy) and returns its go.mod and source dir. */
export async function downloadModule(module: string, version: string, what: string, ctx: LockContext = {}): Promise<{ goMod: string; dir: string }> {
  const work = await scratchDir("resolve");
  try {
    // Outside any module: 'go mod download' of an explicit version prints JSON, with "Error" on failure.
    const command = ["mod", "download", "-json", `${module}@${version}`];
    const result = await runGoRaw(command, { cwd: work, env: ctx.goEnv });
    let info: { Error?: string; GoMod?: string; Dir?: string };
    try {
      info = JSON.parse(result.stdout);
    } catch {
      throw classifyGoFailure(result.all, what, `go ${command.join(" ")}`, result.exitCode);
    }
    if (info.Error || !result.ok) throw classifyGoFailure(info.Error ?? result.all, what, `go ${command.join(" ")}`, result.exitCode);
    if (!info.GoMod || !info.Dir)
      throw new UserError(
        `${what}: cannot resolve ${module}@${version}: no go.mod in the download`,
        `check the module path; 'go list -m -versions ${module}' lists its versions`,
      );
    return { goMod: await readFile(info.GoMod, "utf8"), dir: info.Dir };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * Kubernetes keeps its staging modules (k8s.io/api, k8s.io/client-go, …) in its own
 * repository and points at them with `k8s.io/x => ./staging/src/k8s.io/x`. Replace
 * directives of a dependency do not apply to a module that requires it, so the
 * wrapper module has to say which published version each one is: for Kubernetes
 * v1.MINOR.PATCH that is v0.MINOR.PATCH.
 */
export function kubernetesStagingReplaces(goMod: string, version: string): string[] {
  const match = /^v1\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$/.exec(version);
  if (!match) throw new UserError(`kubernetes: version ${version} is not of the form v1.MINOR.PATCH`, "pin a Kubernetes release such as v1.37.1");
  const staging = `v0.${match[1]}.${match[2]}${match[3] ?? ""}`;
  const replaces: string[] = [];
  for (const line of goMod.split("\n")) {
    const m = /^\s*(?:replace\s+)?(k8s\.io\/[^\s]+)\s+=>\s+\.\/staging\/src\/(k8s\.io\/[^\s]+)\s*$/.exec(line);
    if (m) replaces.push(`${m[1]} => ${m[2]} ${staging}`);
  }
  if (replaces.length === 0)
    throw new UserError(
      `kubernetes ${version}: its go.mod has no staging replace directives`,
      "this layout is not supported; pin a Kubernetes release v1.15 or newer",
    );
  return replaces;
}

/** Versions kubeadm of this Kubernetes release deploys: etcd and CoreDNS follow the Kubernetes pin. */
export function kubeadmVersions(constantsGo: string): { etcd: string; coredns: string } {
  const etcd = /DefaultEtcdVersion\s*=\s*"([^"]+)"/.exec(constantsGo)?.[1];
  const coredns = /CoreDNSVersion\s*=\s*"([^"]+)"/.exec(constantsGo)?.[1];
  if (!etcd || !coredns)
    throw new UserError(
      "kubernetes: cannot find DefaultEtcdVersion/CoreDNSVersion in cmd/kubeadm/app/constants/constants.go",
      "pin etcd and coredns by hand with --etcd and --coredns",
    );
  // Image tags: "3.7.0-0" -> module version v3.7.0 (the "-N" is the image revision).
  return { etcd: `v${etcd.replace(/^v/, "").replace(/-\d+$/, "")}`, coredns: `v${coredns.replace(/^v/, "")}` };
}

/**
 * The etcd or CoreDNS version to pin: the one asked for (--etcd, --coredns); else the one
 * already pinned when it is newer than what kubeadm deploys (a patch release taken for its
 * fixes is not undone by the next lock-artifacts); else kubeadm's.
 */
export function followedVersion(kubeadm: string, pinned?: string, override?: string): { version: string; why: "override" | "pinned" | "kubeadm" } {
  if (override) return { version: override, why: "override" };
  if (pinned && compareVersions(pinned, kubeadm) > 0) return { version: pinned, why: "pinned" };
  return { version: kubeadm, why: "kubeadm" };
}

/** The three groups the appliance needs, all derived from one Kubernetes version. */
export async function kubernetesGroups(
  version: string,
  ctx: LockContext = {},
  overrides: { etcd?: string; coredns?: string } = {},
  pinned: { etcd?: string; coredns?: string } = {},
): Promise<GroupSpec[]> {
  const log = ctx.log ?? defaultLog;
  log("lock", `resolving k8s.io/kubernetes ${version}`);
  const k8s = await downloadModule("k8s.io/kubernetes", version, "kubernetes", ctx);
  const constants = await readFile(join(k8s.dir, "cmd/kubeadm/app/constants/constants.go"), "utf8");
  const derived = kubeadmVersions(constants);
  const etcdChoice = followedVersion(derived.etcd, pinned.etcd, overrides.etcd);
  const corednsChoice = followedVersion(derived.coredns, pinned.coredns, overrides.coredns);
  const etcd = etcdChoice.version;
  const coredns = corednsChoice.version;
  const said = (name: string, c: { version: string; why: string }) =>
    c.why === "override" ? `${name} ${c.version} (asked for)` : c.why === "pinned" ? `${name} ${c.version} (pinned, newer: kept)` : undefined;
  const differs = [said("etcd", etcdChoice), said("CoreDNS", corednsChoice)].filter(Boolean);
  log("lock", `kubeadm ${version} deploys etcd ${derived.etcd} and CoreDNS ${derived.coredns}${differs.length ? `; pinning ${differs.join(", ")}` : ""}`);
  const followNote = (name: string, c: { version: string; why: string }, kubeadmVersion: string) =>
    c.why === "kubeadm" ? `the ${name} version kubeadm ${version} deploys` : `newer than the ${name} ${kubeadmVersion} kubeadm ${version} deploys`;
  return [
    {
      name: "kubernetes",
      module: "k8s.io/kubernetes",
      version,
      binaries: Object.fromEntries(KUBERNETES_BINARIES.map((b) => [b, `k8s.io/kubernetes/cmd/${b}`])),
      replaces: (goMod) => kubernetesStagingReplaces(goMod, version),
    },
    {
      name: "etcd",
      module: "go.etcd.io/etcd/server/v3",
      version: etcd,
      binaries: { etcd: "go.etcd.io/etcd/server/v3" },
      note: followNote("etcd", etcdChoice, derived.etcd),
    },
    // kubespray puts etcdctl and etcdutl on control-plane nodes from etcd's release tarball
    // even when kubeadm runs etcd (roles/etcdctl_etcdutl): the tarball is served, so they are built.
    {
      name: "etcdctl",
      module: "go.etcd.io/etcd/etcdctl/v3",
      alsoRequires: ["go.etcd.io/etcd/etcdutl/v3"],
      version: etcd,
      binaries: { etcdctl: "go.etcd.io/etcd/etcdctl/v3", etcdutl: "go.etcd.io/etcd/etcdutl/v3" },
      note: `etcd's command-line tools, at ${etcdChoice.why === "kubeadm" ? `the etcd version kubeadm ${version} deploys` : "the etcd server's version"}`,
    },
    {
      name: "coredns",
      module: "github.com/coredns/coredns",
      version: coredns,
      binaries: { coredns: "github.com/coredns/coredns" },
      note: followNote("CoreDNS", corednsChoice, derived.coredns),
    },
  ];
}

/** Tool directives need Go 1.24; a wrapper never asks for less. */
const MIN_WRAPPER_GO = "1.24";

/**
 * Writes `<dir>/go.mod` and `<dir>/go.sum` for a group: a module that requires the
 * pinned module, lists the binaries as `tool` directives (so `go mod tidy` records
 * exactly the checksums their builds need) and carries the generated replaces.
 */
export async function generateWrapper(spec: GroupSpec, dir: string, ctx: LockContext = {}): Promise<{ goSum: string; go: string }> {
  const log = ctx.log ?? defaultLog;
  const module = await downloadModule(spec.module, spec.version, spec.name, ctx);
  const moduleGo = goDirective(module.goMod) ?? MIN_WRAPPER_GO;
  const go = compareGoVersions(moduleGo, MIN_WRAPPER_GO) < 0 ? MIN_WRAPPER_GO : moduleGo;
  const godebug = module.goMod.split("\n").filter((l) => /^godebug\s/.test(l));
  const replaces = spec.replaces?.(module.goMod) ?? [];
  const lines = [
    `// Generated by 'icn-bootstrap lock-artifacts' from ${spec.module} ${spec.version}${spec.note ? ` (${spec.note})` : ""}.`,
    "// Do not edit: change the pin in appliance.lock.yaml and regenerate. Built with -mod=readonly,",
    "// so every module is verified against the go.sum beside this file.",
    `module icn-bootstrap.local/go/${spec.name}`,
    "",
    `go ${go}`,
    ...(godebug.length ? ["", ...godebug] : []),
    "",
    ...(spec.alsoRequires?.length
      ? ["require (", ...[spec.module, ...spec.alsoRequires].map((m) => `\t${m} ${spec.version}`), ")"]
      : [`require ${spec.module} ${spec.version}`]),
    ...(replaces.length ? ["", "replace (", ...replaces.map((r) => `\t${r}`), ")"] : []),
    "",
    "tool (",
    ...[...new Set(Object.values(spec.binaries))].sort().map((pkg) => `\t${pkg}`),
    ")",
    "",
  ];
  const work = await scratchDir(`wrapper-${spec.name}`);
  try {
    await writeFile(join(work, "go.mod"), lines.join("\n"));
    log(spec.name, `go mod tidy for ${spec.module} ${spec.version} (${replaces.length} generated replace directives)`);
    await runGo(["mod", "tidy", ...(spec.tidyIgnoringTestOnlyErrors ? ["-e"] : [])], {
      cwd: work,
      env: { GOFLAGS: "-mod=mod", ...ctx.goEnv },
      what: spec.name,
    });
    if (ctx.advisories) {
      const result = await raiseVulnerableDependencies(spec, work, () => readFile(join(work, "go.mod"), "utf8"), ctx.advisories, { goEnv: ctx.goEnv, log });
      const header = raiseHeader(result.raised, result.unraised, ctx.advisories.source);
      if (header.length) {
        const tidied = await readFile(join(work, "go.mod"), "utf8");
        await writeFile(join(work, "go.mod"), tidied.replace(/^module /m, `${header.join("\n")}\nmodule `));
      }
    }
    const goMod = await readFile(join(work, "go.mod"), "utf8");
    const goSum = await readFile(join(work, "go.sum"), "utf8").catch(() => "");
    await mkdir(dir, { recursive: true });
    for (const [file, text] of [
      ["go.mod", goMod],
      ["go.sum", goSum],
    ] as const) {
      const temp = tempSibling(join(dir, file));
      await writeFile(temp, text);
      await rename(temp, join(dir, file));
    }
    return { goSum: sha256Text(goSum), go: goDirective(goMod) ?? go };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

export interface LockArtifactsOptions extends LockContext {
  lockPath?: string;
  /** The Kubernetes version; default: the one already pinned. */
  kubernetes?: string;
  etcd?: string;
  coredns?: string;
  /** Replaces the Kubernetes-derived groups (tests). */
  groups?: GroupSpec[];
  /** Instead: pin these Kubernetes versions as extra entries (kubernetes-<version>), leaving every other entry as it is. */
  alsoKubernetes?: string[];
  /** Only these groups are generated again; every other entry stays as pinned. */
  only?: string[];
  /** Raise reported dependencies with the lock's Go vulnerability database (default: when the lock pins one). */
  raise?: boolean;
}

/** The lock's pinned Go vulnerability database, indexed; undefined (and said) when none is pinned. */
async function pinnedAdvisories(raw: Record<string, unknown>, opts: LockArtifactsOptions): Promise<Advisories | undefined> {
  const log = opts.log ?? defaultLog;
  const pinned = GoVulndbPin.safeParse((raw.advisories as { goVulndb?: unknown } | undefined)?.goVulndb);
  if (!pinned.success) {
    log("lock", "no Go vulnerability database pinned (advisories.goVulndb): dependencies are not raised; pin one with 'icn-bootstrap lock --advisories'");
    return undefined;
  }
  const zip = await pinnedGoVulndb(pinned.data, { offline: false, store: new ContentStore(), goEnv: opts.goEnv });
  if (!zip)
    throw new UserError(
      `${VULNDB_MODULE} ${pinned.data.version} (advisories.goVulndb) could not be read`,
      "run 'icn-bootstrap lock --check' with the Go module proxy reachable",
    );
  return { index: indexReports(await readGoVulndb(zip)), source: `${VULNDB_MODULE} ${pinned.data.version}` };
}

/**
 * Pins the gomod artifacts: generates go/<group>/go.mod and go.sum for each group
 * and writes the entries under `artifacts:` of the lock file. Every other part of
 * the lock file, and artifact entries of other sources, are kept as they are.
 */
export async function lockArtifacts(opts: LockArtifactsOptions = {}): Promise<Artifacts> {
  const lockPath = opts.lockPath ?? DEFAULT_LOCK;
  const log = opts.log ?? defaultLog;
  const raw = await readLockRaw(lockPath);
  const existing = (raw.artifacts ?? {}) as Record<string, unknown>;
  let groups = opts.groups ?? opts.alsoKubernetes?.map(extraKubernetesGroupSpec);
  if (!groups) {
    const pinned = (existing.kubernetes as { version?: string } | undefined)?.version;
    const version = opts.kubernetes ?? pinned;
    if (!version) throw new UserError(`no Kubernetes version pinned in ${lockPath}`, "pass one: 'icn-bootstrap lock-artifacts --kubernetes v1.37.1'");
    groups = [
      ...(await kubernetesGroups(
        version,
        opts,
        { etcd: opts.etcd, coredns: opts.coredns },
        { etcd: pinnedVersion(existing.etcd), coredns: pinnedVersion(existing.coredns) },
      )),
      ...OFFLINE_GROUPS,
      ...METAL3_GROUPS,
      ...ADDON_GROUPS,
      ...APPLIANCE_GROUPS,
      ...TOOL_GROUPS,
    ];
  }
  if (opts.only?.length) {
    const unknown = opts.only.filter((name) => !groups!.some((g) => g.name === name));
    if (unknown.length)
      throw new UserError(`lock-artifacts --only: no Go group named ${unknown.join(", ")}`, `name one of: ${groups.map((g) => g.name).join(", ")}`);
    groups = groups.filter((g) => opts.only!.includes(g.name));
  }
  const advisories = opts.advisories ?? (opts.raise === false ? undefined : await pinnedAdvisories(raw, opts));
  const baseDir = dirname(lockPath);
  const artifacts: Record<string, ArtifactEntry> = {};
  const kubernetes = groups.find((g) => g.name === "kubernetes")?.version;
  for (const [name, entry] of Object.entries(existing)) {
    if (groups.some((g) => g.name === name)) continue;
    const e = entry as ArtifactEntry;
    // Release binaries pinned for another Kubernetes version would break "every component follows the one pin".
    if (kubernetes && e.source === "url" && e.profile === "upstream" && e.version && /^v1\./.test(e.version) && e.version !== kubernetes) {
      log("lock", `dropped upstream entry ${name} (${e.version}); run 'icn-bootstrap lock-artifacts --upstream' to pin ${kubernetes}'s release binaries`);
      continue;
    }
    artifacts[name] = e;
  }
  for (const group of groups) {
    const dir = resolve(baseDir, "go", group.name);
    const { goSum } = await generateWrapper(group, dir, { ...opts, advisories });
    const entry: GoModArtifact = {
      source: "gomod",
      module: group.module,
      version: group.version,
      dir: relative(baseDir, dir),
      goSum: `sha256:${goSum}`,
      binaries: group.binaries,
      profile: "default",
    };
    artifacts[group.name] = entry;
    log(group.name, `pinned ${group.module} ${group.version} (${Object.keys(group.binaries).join(", ")})`);
  }
  const parsed = Artifacts.parse(artifacts);
  await writeLockRaw(lockPath, { ...raw, version: raw.version ?? 1, artifacts: parsed });
  return parsed;
}

function pinnedVersion(entry: unknown): string | undefined {
  const version = (entry as { version?: unknown } | undefined)?.version;
  return typeof version === "string" ? version : undefined;
}

async function readLockRaw(path: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch {
    return { version: 1 };
  }
  const raw = yaml.load(text);
  if (raw === undefined || raw === null) return { version: 1 };
  if (typeof raw !== "object" || Array.isArray(raw)) throw new UserError(`${path} is not a mapping`, "fix or delete the lock file");
  return raw as Record<string, unknown>;
}

async function writeLockRaw(path: string, lock: Record<string, unknown>): Promise<void> {
  const header = "# Generated by 'icn-bootstrap lock'. Pins every external input of the build; builds never rewrite it.\n";
  const temp = tempSibling(path);
  await writeFile(temp, header + yaml.dump(lock, { sortKeys: true, lineWidth: 200 }));
  await rename(temp, path);
}

async function scratchDir(prefix: string): Promise<string> {
  const root = join(cacheRoot(), "tmp");
  await mkdir(root, { recursive: true });
  return mkdtemp(join(root, `${prefix}-`));
}

/** Where official Kubernetes release binaries live (the `upstream` profile). */
export const KUBERNETES_RELEASE_BASE = "https://dl.k8s.io/release";

/**
 * Pins the official release binaries of the pinned Kubernetes version as `url`
 * entries of the `upstream` profile, with the digests the release publishes
 * beside each binary (`<binary>.sha256`). Needs access to the release host; not
 * reachable in this project's build environment, so the default stays gomod.
 */
export async function lockUpstreamKubernetes(opts: { lockPath?: string; baseUrl?: string; arch?: string; log?: LockContext["log"] } = {}): Promise<Artifacts> {
  const lockPath = opts.lockPath ?? DEFAULT_LOCK;
  const log = opts.log ?? defaultLog;
  const raw = await readLockRaw(lockPath);
  const artifacts = Artifacts.parse(raw.artifacts ?? {});
  const k8s = artifacts.kubernetes;
  if (k8s?.source !== "gomod")
    throw new UserError(`no Kubernetes version pinned in ${lockPath}`, "run 'icn-bootstrap lock-artifacts --kubernetes vX.Y.Z' first");
  const base = (opts.baseUrl ?? KUBERNETES_RELEASE_BASE).replace(/\/$/, "");
  for (const binary of Object.keys(k8s.binaries)) {
    const url = `${base}/${k8s.version}/bin/linux/${opts.arch ?? "amd64"}/${binary}`;
    let text: string;
    try {
      const response = await fetch(`${url}.sha256`, { signal: AbortSignal.timeout(30_000) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      text = await response.text();
    } catch (error) {
      throw new UserError(
        `${binary}: cannot read the published digest ${url}.sha256: ${(error as Error).message}`,
        "the upstream profile needs access to the Kubernetes release host; without it, use the default gomod profile",
      );
    }
    const digest = /^[0-9a-f]{64}\b/.exec(text.trim())?.[0];
    if (!digest) throw new UserError(`${binary}: ${url}.sha256 does not hold a sha256 digest`, "check the release base URL");
    const name = `${binary}`;
    const existing = artifacts[name];
    if (existing && existing.source !== "url") throw new UserError(`lock entry '${name}' already exists and is not a url entry`, "rename that entry");
    artifacts[name] = { source: "url", url, sha256: digest, version: k8s.version, executable: true, profile: "upstream" };
    log("lock", `${binary}: upstream ${url} sha256 ${digest.slice(0, 12)}`);
  }
  const parsed = Artifacts.parse(artifacts);
  await writeLockRaw(lockPath, { ...raw, version: raw.version ?? 1, artifacts: parsed });
  return parsed;
}
