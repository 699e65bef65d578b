/**
 * Raising a wrapper module's vulnerable dependencies, as distributions do: when the pinned
 * Go vulnerability database reports a module a group builds with (not the group's own
 * module: that fix moves the pin) at a version that a later one fixes, the wrapper requires
 * the first release the proxy serves at or after the fix, and Go's minimal version
 * selection builds with it. The pinned module stays as released; only its dependencies
 * move, each named in the wrapper's header with the reports it answers.
 */
import { goModModules, hitsOf, type ReportIndex } from "../check/go-vulns.js";
import { compareVersions } from "../check/versions.js";
import { UserError } from "../errors.js";
import { runGoRaw } from "./go.js";
import type { GroupSpec } from "./group-spec.js";

export interface Advisories {
  index: ReportIndex;
  /** Which database, for the header ("golang.org/x/vulndb v0.0.0-…"). */
  source: string;
}

export interface Raise {
  module: string;
  from: string;
  to: string;
  /** The reports the raise answers. */
  reports: string[];
}

/** A dependency that stays where it is although a report names it, and why. */
export interface Unraised {
  module: string;
  version: string;
  why: string;
}

export interface RaiseContext {
  goEnv?: Record<string, string | undefined>;
  log: (scope: string, message: string) => void;
}

/** Rounds of raising: a raised module may require others that are reported too. */
const MAX_ROUNDS = 4;

/** Modules a raise must not touch: the group's own, and those its replace directives decide. */
function untouchable(spec: GroupSpec, goMod: string): Set<string> {
  const keep = new Set([spec.module, ...(spec.alsoRequires ?? []), ...Object.keys(spec.keepDependencies ?? {})]);
  for (const m of goMod.replace(/\/\/.*$/gm, "").matchAll(/^\s*(?:replace\s+)?(\S+)(?:\s+v\S+)?\s+=>/gm)) keep.add(m[1]!);
  return keep;
}

/** The versions the module proxy lists for a module (empty when it lists none). */
async function servedVersions(module: string, dir: string, ctx: RaiseContext): Promise<string[]> {
  const listed = await runGoRaw(["list", "-m", "-versions", "-json", module], { cwd: dir, env: ctx.goEnv });
  if (!listed.ok) return [];
  try {
    return (JSON.parse(listed.stdout) as { Versions?: string[] }).Versions ?? [];
  } catch {
    return [];
  }
}

/**
 * The version to raise to: the first release at or after `fixed` the proxy lists (a fix
 * often lands as a pseudo-version the proxy does not serve, before the release that has
 * it); else `fixed` itself when the proxy serves that exact version.
 */
async function versionToRaiseTo(module: string, fixed: string, dir: string, ctx: RaiseContext): Promise<string | undefined> {
  const releases = (await servedVersions(module, dir, ctx)).filter((v) => !v.includes("-") && compareVersions(v, fixed) >= 0);
  releases.sort(compareVersions);
  if (releases.length) return releases[0];
  const exact = await runGoRaw(["mod", "download", "-json", `${module}@${fixed}`], { cwd: dir, env: ctx.goEnv });
  return exact.ok ? fixed : undefined;
}

/**
 * Raises, in the wrapper module being generated in `dir` (go.mod tidy already), every
 * reported dependency that has a fix; returns what moved and what stayed with why.
 */
export async function raiseVulnerableDependencies(
  spec: GroupSpec,
  dir: string,
  readGoMod: () => Promise<string>,
  advisories: Advisories,
  ctx: RaiseContext,
): Promise<{ raised: Raise[]; unraised: Unraised[] }> {
  const raised: Raise[] = [];
  const unraised = new Map<string, Unraised>();
  const env = ctx.goEnv;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const goMod = await readGoMod();
    const keep = untouchable(spec, goMod);
    let moved = 0;
    for (const [module, version] of [...goModModules(goMod)].sort(([a], [b]) => a.localeCompare(b))) {
      const hits = hitsOf(module, version, advisories.index);
      if (!hits) continue;
      if (keep.has(module)) {
        const why = spec.keepDependencies?.[module];
        if (why) unraised.set(module, { module, version, why });
        continue;
      }
      if (!hits.fixedIn) {
        unraised.set(module, { module, version, why: `no fix published for ${hits.unfixed.join(", ")}` });
        continue;
      }
      const to = await versionToRaiseTo(module, hits.fixedIn, dir, { ...ctx, goEnv: env });
      if (!to) {
        unraised.set(module, { module, version, why: `the fix (${hits.fixedIn}) is not served by the Go module proxy` });
        continue;
      }
      const got = await runGoRaw(["get", `${module}@${to}`], { cwd: dir, env });
      if (!got.ok) {
        const reason = got.all.trim().split("\n").pop() ?? "go get failed";
        unraised.set(module, { module, version, why: `go get ${module}@${to} failed: ${reason}` });
        continue;
      }
      ctx.log(spec.name, `raised ${module} ${version} -> ${to} (${hits.ids.map((id) => id.replace(/ \(.*\)$/, "")).join(", ")})`);
      raised.push({ module, from: version, to, reports: hits.ids.map((id) => id.replace(/ \(.*\)$/, "")) });
      unraised.delete(module);
      moved++;
    }
    if (moved === 0) break;
    const tidy = await runGoRaw(["mod", "tidy", ...(spec.tidyIgnoringTestOnlyErrors ? ["-e"] : [])], { cwd: dir, env });
    if (!tidy.ok)
      throw new UserError(
        `${spec.name}: go mod tidy failed after raising ${raised.map((r) => `${r.module} to ${r.to}`).join(", ")}: ${tidy.all.trim().split("\n").slice(-3).join(" / ")}`,
        "hold the raise back with keepDependencies in the group's spec (its components.ts), or run 'icn-bootstrap lock-artifacts --no-raise'",
      );
  }
  return { raised, unraised: [...unraised.values()] };
}

/** The header lines a wrapper's go.mod carries for its raises (go mod tidy keeps comments above `module`). */
export function raiseHeader(raised: Raise[], unraised: Unraised[], source: string): string[] {
  if (raised.length === 0 && unraised.length === 0) return [];
  return [
    `// Dependencies raised for known vulnerabilities (${source}):`,
    ...raised.map((r) => `//   ${r.module} ${r.from} => ${r.to} (${r.reports.join(", ")})`),
    ...unraised.map((u) => `//   ${u.module} ${u.version} kept: ${u.why}`),
  ];
}
