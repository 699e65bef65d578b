/**
 * What `lock --check` says about each pinned component, and the exit status that tells the
 * verdicts apart. Every line names the component, its pin and the command that moves it.
 */
import { CHECK_EXIT } from "../debian/check.js";

/** Worst first: the order lines are printed in. */
export const VERDICTS = ["out-of-support", "vulnerable", "unknown", "updates", "ends-soon"] as const;
export type Verdict = (typeof VERDICTS)[number];

export interface Finding {
  verdict: Verdict;
  /** The component as the lock or the image recipes name it (lock entry, image, Debian package). */
  component: string;
  /** The pin: module and version, package==version, Debian package and version. */
  pin: string;
  detail: string;
  /** The command (or edit) that moves the pin. */
  move: string;
}

/** A pinned component as the checks see it. */
export interface ComponentPin {
  /** How the definition's support windows name it: artifact:<entry>, debian:<package>, pypi:<package>. */
  key: string;
  component: string;
  version: string;
  pin: string;
  /** The command that moves it, to `to` when a target version is known. */
  move: (to?: string) => string;
}

const LABEL: Record<Verdict, string> = {
  "out-of-support": "OUT OF SUPPORT",
  vulnerable: "VULNERABLE",
  unknown: "UNKNOWN",
  updates: "UPDATE WAITING",
  "ends-soon": "SUPPORT ENDS SOON",
};

/**
 * One line per finding, worst first. Unknowns with the same cause and remedy (the same
 * data missing) share one line listing each component and pin.
 */
export function describeFindings(findings: Finding[]): string[] {
  const sorted = [...findings].sort(
    (a, b) => VERDICTS.indexOf(a.verdict) - VERDICTS.indexOf(b.verdict) || a.component.localeCompare(b.component) || a.detail.localeCompare(b.detail),
  );
  const lines: string[] = [];
  const unknowns = new Map<string, Finding[]>();
  for (const f of sorted) {
    if (f.verdict !== "unknown") {
      lines.push(`${LABEL[f.verdict]}: ${f.component} (${f.pin}): ${f.detail}\n    move: ${f.move}`);
      continue;
    }
    const key = `${f.detail}\n${f.move}`;
    unknowns.set(key, [...(unknowns.get(key) ?? []), f]);
  }
  for (const group of unknowns.values()) {
    const [first] = group;
    const what = group.map((f) => `${f.component} (${f.pin})`).join(", ");
    lines.push(`${LABEL.unknown}: ${what}: ${first!.detail}\n    to know: ${first!.move}`);
  }
  return lines;
}

export function findingsExit(findings: Finding[]): number {
  const has = (v: Verdict) => findings.some((f) => f.verdict === v);
  return (
    (has("out-of-support") ? CHECK_EXIT.outOfSupport : 0) |
    (has("vulnerable") ? CHECK_EXIT.vulnerable : 0) |
    (has("updates") ? CHECK_EXIT.securityUpdates : 0) |
    (has("unknown") ? CHECK_EXIT.unknown : 0)
  );
}

/** The exit status in words. */
export function describeStatus(status: number): string {
  if (status === 0) return "fine";
  const words: [number, string][] = [
    [CHECK_EXIT.outOfSupport, "out of support"],
    [CHECK_EXIT.vulnerable, "vulnerable"],
    [CHECK_EXIT.gone, "Debian pins gone"],
    [CHECK_EXIT.cacheOnly, "Debian pins only in this cache"],
    [CHECK_EXIT.securityUpdates, "updates waiting"],
    [CHECK_EXIT.notIndexed, "Debian pins no longer indexed"],
    [CHECK_EXIT.unknown, "some data unknown"],
  ];
  return words
    .filter(([bit]) => status & bit)
    .map(([, word]) => word)
    .join(", ");
}
