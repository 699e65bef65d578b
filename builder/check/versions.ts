/** Comparing the versions the checks meet: Go modules (semver, v-prefixed or not), Debian's upstream part, PyPI releases. */

/** "v1.2.3-rc.1+incompatible", "1.2.3", "1:29.0.5-0+deb13u3" (epoch and Debian revision dropped) -> parts. */
function parse(version: string): { release: number[]; pre: string[] } {
  const v = version
    .trim()
    .replace(/^\d+:/, "")
    .replace(/^v/, "")
    .replace(/\+incompatible$/, "");
  const m = /^(\d+(?:\.\d+)*)(?:-([0-9A-Za-z.-]+))?/.exec(v);
  if (!m) return { release: [], pre: [v] };
  return { release: m[1]!.split(".").map(Number), pre: m[2] ? m[2].split(".") : [] };
}

/** Semantic version order (pre-releases before their release); -1, 0, 1. */
export function compareVersions(a: string, b: string): number {
  const pa = parse(a);
  const pb = parse(b);
  for (let i = 0; i < Math.max(pa.release.length, pb.release.length, 3); i++) {
    const d = (pa.release[i] ?? 0) - (pb.release[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  if (pa.pre.length === 0 || pb.pre.length === 0) return Math.sign(pb.pre.length - pa.pre.length);
  for (let i = 0; i < Math.max(pa.pre.length, pb.pre.length); i++) {
    const x = pa.pre[i];
    const y = pb.pre[i];
    if (x === undefined || y === undefined) return x === undefined ? -1 : 1;
    if (x === y) continue;
    const nx = /^\d+$/.test(x);
    const ny = /^\d+$/.test(y);
    if (nx && ny) return Math.sign(Number(x) - Number(y));
    if (nx !== ny) return nx ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return 0;
}

/** Whether a version is on a release line: "2.2" holds 2.2.3, v2.2.0-rc.1 and Debian's 2.2.3~ds1-1, not 2.20.1. */
export function onLine(version: string, series: string): boolean {
  const v = version.replace(/^\d+:/, "").replace(/^v/, "");
  return v.startsWith(series) && !/^\d/.test(v.slice(series.length));
}

/** The line a version is on: its first two numbers ("v1.35.4" -> "1.35"). */
export function lineOf(version: string): string {
  return parse(version).release.slice(0, 2).join(".");
}

/** Newest release (no pre-release) on the same line and newer than `version`, of a list of versions. */
export function newestPatch(version: string, available: string[]): string | undefined {
  const line = lineOf(version);
  let best: string | undefined;
  for (const candidate of available) {
    // Releases only: "v1.2.3", "10.2.3"; not "v1.2.4-rc.1", "10.2.4rc1", "10.2.4.dev1".
    if (!/^v?\d+(\.\d+)*$/.test(candidate.replace(/\+incompatible$/, ""))) continue;
    if (lineOf(candidate) !== line || compareVersions(candidate, version) <= 0) continue;
    if (!best || compareVersions(candidate, best) > 0) best = candidate;
  }
  return best;
}
