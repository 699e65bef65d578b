/**
 * Known vulnerabilities of the Go pins: every module a pinned group builds with (its
 * wrapper go.mod's requirements, replace directives applied) and the standard library of
 * the toolchain that builds the binaries, matched against the pinned Go vulnerability
 * database's affected version ranges. The match is by module version: whether a binary
 * reaches the vulnerable code is not analysed (govulncheck -mode binary would say).
 */
import type { ComponentPin, Finding } from "./findings.js";
import { compareVersions } from "./versions.js";
import type { OsvRange, OsvReport } from "./vulndb.js";

/** The modules a go.mod builds with: module path -> version, after its replace directives. */
export function goModModules(goMod: string): Map<string, string> {
  const modules = new Map<string, string>();
  const text = goMod.replace(/\/\/.*$/gm, "");
  for (const block of text.matchAll(/^require\s*\(([^)]*)\)/gm))
    for (const line of block[1]!.split("\n")) {
      const m = /^\s*(\S+)\s+(v\S+)\s*$/.exec(line);
      if (m) modules.set(m[1]!, m[2]!);
    }
  for (const m of text.matchAll(/^require\s+([^\s(]+)\s+(v\S+)\s*$/gm)) modules.set(m[1]!, m[2]!);
  const replaces = [...text.matchAll(/^replace\s*\(([^)]*)\)/gm)].flatMap((b) => b[1]!.split("\n"));
  replaces.push(...[...text.matchAll(/^replace\s+([^(].*)$/gm)].map((m) => m[1]!));
  for (const line of replaces) {
    // old [version] => new version (a local directory replacement has no version: not a module download).
    const m = /^\s*(\S+)(?:\s+(v\S+))?\s+=>\s+(\S+)\s+(v\S+)\s*$/.exec(line);
    if (!m || !modules.has(m[1]!)) continue;
    if (m[2] && modules.get(m[1]!) !== m[2]) continue;
    modules.delete(m[1]!);
    modules.set(m[3]!, m[4]!);
  }
  return modules;
}

export type ReportIndex = Map<string, { report: OsvReport; ranges: OsvRange[][] }[]>;

/** The reports by affected module ("stdlib" and "toolchain" for Go itself). */
export function indexReports(reports: OsvReport[]): ReportIndex {
  const index: ReportIndex = new Map();
  for (const report of reports)
    for (const affected of report.affected) {
      const list = index.get(affected.module) ?? [];
      list.push({ report, ranges: affected.ranges });
      index.set(affected.module, list);
    }
  return index;
}

const ZERO = "0";

/** Whether `version` is in one of the ranges; with the fixed version that ends its range, if any. */
export function affectedBy(ranges: OsvRange[][], version: string): { fixed?: string } | undefined {
  for (const events of ranges) {
    const key = (e: OsvRange) => e.introduced ?? e.fixed ?? e.last_affected ?? ZERO;
    const sorted = [...events].sort((a, b) => (key(a) === ZERO ? -1 : key(b) === ZERO ? 1 : compareVersions(key(a), key(b))));
    let inside = false;
    let fixed: string | undefined;
    for (const e of sorted) {
      if (e.introduced !== undefined && (e.introduced === ZERO || compareVersions(version, e.introduced) >= 0)) inside = true;
      else if (e.fixed !== undefined && compareVersions(version, e.fixed) >= 0) inside = false;
      else if (e.last_affected !== undefined && compareVersions(version, e.last_affected) > 0) inside = false;
    }
    if (!inside) continue;
    for (const e of sorted) if (e.fixed !== undefined && compareVersions(e.fixed, version) > 0) fixed ??= e.fixed;
    return { fixed };
  }
  return undefined;
}

export interface GoTarget {
  pin: ComponentPin;
  /** Module path -> version it builds with. */
  modules: Map<string, string>;
  /** The module whose version the pin is (its fix moves the pin itself). */
  main?: string;
  /** The command that raises its dependencies to their fixes (a gomod wrapper's). */
  raise?: string;
}

export interface ModuleHits {
  module: string;
  version: string;
  ids: string[];
  /** The version fixing every report, when each has a fix. */
  fixedIn?: string;
  unfixed: string[];
}

/** The reports that name a module at a version, and the version that fixes them all (when each has a fix). */
export function hitsOf(module: string, version: string, index: ReportIndex): ModuleHits | undefined {
  const hits: { report: OsvReport; fixed?: string }[] = [];
  for (const { report, ranges } of index.get(module) ?? []) {
    const hit = affectedBy(ranges, version);
    if (hit && !hits.some((h) => h.report.id === report.id)) hits.push({ report, ...hit });
  }
  if (hits.length === 0) return undefined;
  hits.sort((a, b) => a.report.id.localeCompare(b.report.id));
  const unfixed = hits.filter((h) => !h.fixed).map((h) => h.report.id);
  const fixedIn = unfixed.length
    ? undefined
    : hits.reduce<string | undefined>((max, h) => (!max || compareVersions(h.fixed!, max) > 0 ? h.fixed : max), undefined);
  const ids = hits.map((h) => {
    const cves = h.report.aliases.filter((a) => a.startsWith("CVE-"));
    return cves.length ? `${h.report.id} (${cves.join(", ")})` : h.report.id;
  });
  return { module, version, ids, fixedIn, unfixed };
}

const OWN = new Set(["stdlib", "toolchain"]);

/**
 * Per target: a finding for its own module (the pinned module, or Go's standard library and
 * go command), whose fix moves the pin itself; and one for the modules it builds with,
 * whose fixes need a release of it that requires them (or no fix is published yet).
 */
export function goVulnFindings(targets: GoTarget[], index: ReportIndex): Finding[] {
  const findings: Finding[] = [];
  for (const target of targets) {
    const deps: ModuleHits[] = [];
    for (const [module, version] of [...target.modules].sort(([a], [b]) => a.localeCompare(b))) {
      const hits = hitsOf(module, version, index);
      if (!hits) continue;
      if (module !== target.main && !OWN.has(module)) {
        deps.push(hits);
        continue;
      }
      const fixed = hits.fixedIn ? goVersionOf(module, hits.fixedIn) : undefined;
      findings.push({
        verdict: "vulnerable",
        component: target.pin.component,
        pin: target.pin.pin,
        detail: `${OWN.has(module) ? `${module === "stdlib" ? "the standard library" : "the go command"} ${goVersionOf(module, version)}: ` : ""}${hits.ids.join(", ")}; ${
          fixed ? `fixed in ${fixed}` : `no fixed version published for ${hits.unfixed.join(", ")}: the pin stays until there is one`
        }`,
        move: target.pin.move(fixed),
      });
    }
    if (deps.length === 0) continue;
    const described = deps.map(
      (d) =>
        `${d.module} ${goVersionOf(d.module, d.version)} (${d.ids.map((id) => id.replace(/ \(.*\)$/, "")).join(", ")}; ${d.fixedIn ? `fixed in ${goVersionOf(d.module, d.fixedIn)}` : `no fix published for ${d.unfixed.join(", ")}`})`,
    );
    findings.push({
      verdict: "vulnerable",
      component: target.pin.component,
      pin: target.pin.pin,
      detail: `${deps.length} module${deps.length === 1 ? "" : "s"} it builds with ${deps.length === 1 ? "has" : "have"} reports at the pinned version${deps.length === 1 ? "" : "s"} (matched by version; whether the binary reaches the code is not analysed): ${described.join("; ")}`,
      move: target.raise
        ? `${target.raise} (raises each fixed one in its wrapper module; the rest need a release of ${target.pin.component} that requires the fixes), then build`
        : `a release of ${target.pin.component} that requires the fixed versions: ${target.pin.move()}`,
    });
  }
  return findings;
}

/** Versions as each ecosystem writes them: Go itself "go1.26.9", modules "v1.2.3". */
function goVersionOf(module: string, version: string): string {
  if (module === "stdlib" || module === "toolchain") return `go${version.replace(/^(go|v)/, "")}`;
  return version.startsWith("v") ? version : `v${version}`;
}
