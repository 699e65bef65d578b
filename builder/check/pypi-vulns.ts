/**
 * Known vulnerabilities of the PyPI pins, as PyPI's own JSON API lists them for the pinned
 * release (`/pypi/<name>/<version>/json`: `vulnerabilities`, with ids, aliases and the
 * versions that fix each). Fetched now, or the answer kept from the last time; with
 * neither, the pin is "unknown", never fine.
 */
import { answer, type AnswerOptions } from "./answers.js";
import type { ComponentPin, Finding } from "./findings.js";
import { compareVersions } from "./versions.js";

export const PYPI = "https://pypi.org/pypi";

interface PypiVulnerability {
  id: string;
  aliases?: string[];
  fixed_in?: string[];
  withdrawn?: string | null;
}

export interface PypiResult {
  findings: Finding[];
  /** Day of the oldest answer used, and whether any came from the cache. */
  oldest?: string;
  cached: number;
}

export async function pypiVulnFindings(pins: ComponentPin[], opts: AnswerOptions & { pypi: string }): Promise<PypiResult> {
  const result: PypiResult = { findings: [], cached: 0 };
  for (const pin of pins) {
    const name = pin.key.replace(/^pypi:/, "");
    const url = `${opts.pypi}/${name}/${pin.version}/json`;
    let got = await answer(url, opts);
    if (got && got.status !== 200) {
      // Some PyPI mirrors answer only the project's JSON: it lists the vulnerabilities of the newest release, so it answers for a pin at that release.
      const project = await answer(`${opts.pypi}/${name}/json`, opts);
      const parsed = project?.status === 200 ? (JSON.parse(project.body) as { info?: { version?: string }; releases?: Record<string, unknown> }) : undefined;
      if (parsed?.info?.version === pin.version) got = project;
      else if (parsed?.releases && pin.version in parsed.releases) {
        result.findings.push({
          verdict: "unknown",
          component: pin.component,
          pin: pin.pin,
          detail: `vulnerabilities not known: PyPI lists the release but answers HTTP ${got.status} at ${url} (this PyPI serves the vulnerabilities of the newest release, ${parsed.info?.version}, only)`,
          move: `icn-bootstrap lock --check where ${url} answers (pypi.org's JSON API does)`,
        });
        continue;
      }
    }
    if (!got || got.status !== 200) {
      result.findings.push({
        verdict: "unknown",
        component: pin.component,
        pin: pin.pin,
        detail: got
          ? `PyPI has no release ${name} ${pin.version} (HTTP ${got.status} at ${url}): its vulnerabilities cannot be read`
          : "vulnerabilities not known: PyPI was not reachable and this machine has no earlier answer",
        move: got ? pin.move() : "icn-bootstrap lock --check with the network (the answers are kept for --offline)",
      });
      continue;
    }
    if (got.cached) result.cached++;
    if (!result.oldest || got.fetchedAt < result.oldest) result.oldest = got.fetchedAt;
    const vulns = ((JSON.parse(got.body) as { vulnerabilities?: PypiVulnerability[] }).vulnerabilities ?? []).filter((v) => !v.withdrawn);
    if (vulns.length === 0) continue;
    const fixes = vulns.map((v) => (v.fixed_in ?? []).filter((f) => compareVersions(f, pin.version) > 0).sort(compareVersions)[0]);
    const fixedIn = fixes.every(Boolean) ? fixes.reduce((max, f) => (compareVersions(f!, max!) > 0 ? f : max)) : undefined;
    const ids = vulns.map((v) => {
      const cves = (v.aliases ?? []).filter((a) => a.startsWith("CVE-"));
      return `${v.id}${cves.length ? ` (${cves.join(", ")})` : ""}`;
    });
    const unfixed = vulns.filter((_, i) => !fixes[i]).map((v) => v.id);
    result.findings.push({
      verdict: "vulnerable",
      component: pin.component,
      pin: pin.pin,
      detail: `${ids.join(", ")}; ${fixedIn ? `fixed in ${fixedIn}` : `no newer fixed version listed for ${unfixed.join(", ")}`}${got.cached ? ` (PyPI's answer of ${got.fetchedAt.slice(0, 10)})` : ""}`,
      move: pin.move(fixedIn),
    });
  }
  return result;
}
