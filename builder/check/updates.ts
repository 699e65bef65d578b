/**
 * Updates waiting: a newer patch release on the pinned line, as the Go module proxy's
 * version list or PyPI's release list says (fetched now, or kept from the last time).
 */
import { answer, type AnswerOptions } from "./answers.js";
import type { ComponentPin, Finding } from "./findings.js";
import { newestPatch } from "./versions.js";

/** The Go module proxy to ask: GOPROXY's first proxy (not direct/off), else proxy.golang.org. */
export function goProxyBase(env: Record<string, string | undefined> = process.env): string {
  const first = (env.GOPROXY ?? "").split(/[,|]/).find((p) => p && p !== "direct" && p !== "off");
  return (first ?? "https://proxy.golang.org").replace(/\/$/, "");
}

/** The proxy's case encoding of a module path: an upper-case letter becomes '!' and its lower case. */
export function escapeModulePath(module: string): string {
  return module.replace(/[A-Z]/g, (c) => `!${c.toLowerCase()}`);
}

export interface ReleaseList {
  versions?: string[];
  /** The HTTP status of a refusal (no list). */
  status?: number;
  fetchedAt?: string;
  cached?: boolean;
}

export const PROXY_LIST = "the Go module proxy's version list";
export const PYPI_LIST = "PyPI's release list";

export async function goModuleVersions(module: string, opts: AnswerOptions & { proxy: string }): Promise<ReleaseList> {
  const got = await answer(`${opts.proxy}/${escapeModulePath(module)}/@v/list`, opts);
  if (!got || got.status !== 200) return { fetchedAt: got?.fetchedAt, cached: got?.cached, status: got?.status };
  return { versions: got.body.split("\n").filter(Boolean), fetchedAt: got.fetchedAt, cached: got.cached };
}

export async function pypiReleases(name: string, opts: AnswerOptions & { pypi: string }): Promise<ReleaseList> {
  const got = await answer(`${opts.pypi}/${name}/json`, opts);
  if (!got || got.status !== 200) return { fetchedAt: got?.fetchedAt, cached: got?.cached, status: got?.status };
  const releases = (JSON.parse(got.body) as { releases?: Record<string, { yanked?: boolean }[]> }).releases ?? {};
  const versions = Object.entries(releases)
    .filter(([, files]) => files.length > 0 && files.some((f) => !f.yanked))
    .map(([v]) => v);
  return { versions, fetchedAt: got.fetchedAt, cached: got.cached };
}

/** An "updates" finding when the list has a newer patch release; an "unknown" one when there is no list. */
export function updateFinding(pin: ComponentPin, list: ReleaseList, source: string): Finding | undefined {
  if (!list.versions)
    return {
      verdict: "unknown",
      component: pin.component,
      pin: pin.pin,
      detail: list.status
        ? `newer releases not known: ${source} answered HTTP ${list.status}`
        : `newer releases not known: ${source} was not reachable and this machine has no earlier answer`,
      move: list.status
        ? "the project's own release page (this service refuses the list)"
        : "icn-bootstrap lock --check with the network (the answers are kept for --offline)",
    };
  const newer = newestPatch(pin.version, list.versions);
  if (!newer) return undefined;
  return {
    verdict: "updates",
    component: pin.component,
    pin: pin.pin,
    detail: `${newer} is released on the same line (${source}${list.cached ? `, as of ${list.fetchedAt?.slice(0, 10)}` : ""})`,
    move: pin.move(newer),
  };
}
