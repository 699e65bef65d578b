/**
 * `lock --check` beyond Debian's indexes: for every pinned component, its known
 * vulnerabilities (Go modules and the Go standard library against the pinned Go
 * vulnerability database, PyPI pins against PyPI's JSON API), newer patch releases of its
 * line, and its upstream support window (the definition's `support:`).
 */
import { ContentStore } from "../cache.js";
import type { ApplianceDefinition } from "../definition.js";
import type { LockFile } from "../lockfile.js";
import { goToolchain } from "../sources/go.js";
import type { ComponentPin, Finding } from "./findings.js";
import { goVulnFindings, indexReports, type GoTarget } from "./go-vulns.js";
import { artifactPins, debianPins, definitionRecipes, goTargets, pypiPins } from "./pins.js";
import { PYPI, pypiVulnFindings } from "./pypi-vulns.js";
import { checkSupport, WARN_DAYS } from "./support.js";
import { goModuleVersions, goProxyBase, PROXY_LIST, PYPI_LIST, pypiReleases, updateFinding } from "./updates.js";
import { pinnedGoVulndb, readGoVulndb, VULNDB_MODULE } from "./vulndb.js";

export interface ComponentCheckOptions {
  lock: LockFile;
  /** Where the lock's go/<group> wrappers are. */
  baseDir: string;
  /** The definition: its support windows and the images it builds. */
  definition: ApplianceDefinition;
  /** No network: caches only. */
  offline: boolean;
  /** YYYY-MM-DD. */
  today: string;
  store?: ContentStore;
  imagesDir?: string;
  pypi?: string;
  goEnv?: Record<string, string | undefined>;
  answersDir?: string;
}

export interface ComponentCheck {
  /** What was checked against what, and how old that data is. */
  lines: string[];
  findings: Finding[];
}

const DAY_MS = 86_400_000;
const daysBetween = (from: string, to: string) => Math.floor((Date.parse(to) - Date.parse(from)) / DAY_MS);

export async function checkComponents(opts: ComponentCheckOptions): Promise<ComponentCheck> {
  const store = opts.store ?? new ContentStore();
  const answers = { offline: opts.offline, dir: opts.answersDir };
  const artifacts = artifactPins(opts.lock);
  const windows = opts.definition.support;
  const pypi = await pypiPins(await definitionRecipes(opts.definition, opts.lock), opts.imagesDir);
  const debian = debianPins(opts.lock, windows);
  const lines: string[] = [];
  const findings: Finding[] = [];

  // Support windows.
  const support = checkSupport([...artifacts, ...pypi, ...debian], windows, opts.today);
  findings.push(...support.findings);
  lines.push(
    `Support windows (the definition's support:, checked on ${opts.today}; warned ${WARN_DAYS} days ahead): ${support.supported.length} pins within theirs` +
      (support.supported.length ? ` (${support.supported.map((s) => `${s.pin.component} to ${s.endOfLife}`).join(", ")})` : ""),
  );
  if (support.unrecorded.length)
    lines.push(`  no window recorded (add one to support: with its source): ${support.unrecorded.map((p) => `${p.component} ${p.version}`).join(", ")}`);
  for (const w of support.unused) lines.push(`  the window of ${w.pin} ${w.series} matches no pin any more: remove it or record the pinned line's`);

  // Go: the pinned vulnerability database against every module the groups build with, and the toolchain's standard library.
  const go = await goVulnerabilities(opts, store, artifacts);
  lines.push(...go.lines);
  findings.push(...go.findings);

  // PyPI: the JSON API's vulnerabilities of each pinned release.
  const pypiBase = opts.pypi ?? PYPI;
  const py = await pypiVulnFindings(pypi, { ...answers, pypi: pypiBase });
  findings.push(...py.findings);
  const answered = pypi.length - py.findings.filter((f) => f.verdict === "unknown").length;
  if (pypi.length)
    lines.push(
      `PyPI (${pypi.length} pins of the image recipes): vulnerabilities as ${pypiBase} lists them for each pinned release; ${answered} answered` +
        (py.cached ? `, ${py.cached} of them from this machine's cache (oldest ${py.oldest?.slice(0, 10)})` : answered ? " now" : ""),
    );

  // Updates waiting: newer patch releases on each pinned line.
  const proxy = goProxyBase(opts.goEnv ?? process.env);
  const updates = await Promise.all([
    // Go modules' releases as the proxy lists them (a gosrc archive's tag need not be a module version the proxy serves).
    ...go.targets
      .filter((t) => t.main && opts.lock.artifacts[t.pin.component]?.source === "gomod")
      .map(async (t) => updateFinding(t.pin, await goModuleVersions(t.main!, { ...answers, proxy }), PROXY_LIST)),
    ...pypi.map(async (p) => updateFinding(p, await pypiReleases(p.key.replace(/^pypi:/, ""), { ...answers, pypi: pypiBase }), PYPI_LIST)),
  ]);
  findings.push(...updates.filter((f): f is Finding => f !== undefined));

  if (opts.lock.images)
    lines.push(
      "Container images: their Debian packages are the lock's images.debian sets, checked against the security archive with the root filesystem's; " +
        "their Go programs and Python packages are the artifacts and PyPI pins above. Images pulled from upstream registries (the upstream profile) are not checked.",
    );
  const uncovered = artifacts.filter((p) => !go.targets.some((t) => t.pin === p) && !go.missing.includes(p));
  if (uncovered.length) lines.push(`No vulnerability data source for: ${uncovered.map((p) => p.pin).join(", ")} (not Go code)`);
  const fromArchives = go.targets.filter((t) => opts.lock.artifacts[t.pin.component]?.source === "gosrc");
  if (fromArchives.length) lines.push(`Newer releases not looked for (source archives, no release list): ${fromArchives.map((t) => t.pin.pin).join(", ")}`);
  return { lines, findings };
}

async function goVulnerabilities(
  opts: ComponentCheckOptions,
  store: ContentStore,
  artifacts: ComponentPin[],
): Promise<{ lines: string[]; findings: Finding[]; targets: GoTarget[]; missing: ComponentPin[] }> {
  const { targets, missing } = await goTargets(opts.lock, opts.baseDir, artifacts);
  const findings: Finding[] = missing.map((pin) => ({
    verdict: "unknown",
    component: pin.component,
    pin: pin.pin,
    detail: "its modules are not known on this machine: the source archive was never extracted here",
    move: `icn-bootstrap fetch --only ${pin.component}, then check again`,
  }));
  const lines: string[] = [];
  if (targets.length === 0 && missing.length === 0) return { lines, findings, targets, missing };
  const toolchain = await goToolchain({ env: opts.goEnv }).catch((error: Error) => error);
  const stdlib: GoTarget | undefined =
    toolchain instanceof Error
      ? undefined
      : {
          pin: {
            key: "go",
            component: "Go toolchain (builds every Go artifact)",
            version: toolchain.version,
            pin: `${toolchain.version} at ${toolchain.bin}`,
            move: (to) =>
              `install ${to ? `${to} or newer` : "a Go release with the fixes"} (scripts/setup-host.sh installs Debian's golang-go; ICN_BOOTSTRAP_GO points at another go), then rebuild the Go artifacts`,
          },
          modules: new Map([
            ["stdlib", toolchain.version.replace(/^go/, "")],
            ["toolchain", toolchain.version.replace(/^go/, "")],
          ]),
        };
  if (toolchain instanceof Error) lines.push(`Go toolchain: not found (${toolchain.message}): the standard library's vulnerabilities are not checked`);
  const pin = opts.lock.advisories?.goVulndb;
  const unknown = (detail: string, move: string) =>
    [...targets, ...(stdlib ? [stdlib] : [])].map((t): Finding => ({ verdict: "unknown", component: t.pin.component, pin: t.pin.pin, detail, move }));
  if (!pin) {
    lines.push("Go vulnerability database: not pinned in the lock file (advisories.goVulndb)");
    findings.push(...unknown("vulnerabilities not known: no Go vulnerability database is pinned", "icn-bootstrap lock --advisories"));
    return { lines, findings, targets, missing };
  }
  let zip: string | undefined;
  let failure = "";
  try {
    zip = await pinnedGoVulndb(pin, { offline: opts.offline, store, goEnv: opts.goEnv });
  } catch (error) {
    failure = (error as Error).message.split("\n")[0]!;
  }
  const age = `${VULNDB_MODULE} ${pin.version}, reports up to ${pin.time.slice(0, 10)} (${daysBetween(pin.time.slice(0, 10), opts.today)} days before ${opts.today})`;
  if (!zip) {
    const why = failure || "not in this machine's cache and --offline";
    lines.push(`Go vulnerability database: ${age}: not available (${why})`);
    findings.push(
      ...unknown(
        `vulnerabilities not known: the pinned Go vulnerability database is not available (${why})`,
        "icn-bootstrap lock --check once with the Go module proxy reachable (it caches the database)",
      ),
    );
    return { lines, findings, targets, missing };
  }
  const reports = await readGoVulndb(zip);
  const all = [...targets, ...(stdlib ? [stdlib] : [])];
  lines.push(
    `Go vulnerability database: ${age}; ${reports.length} reports matched against the ${all.reduce((n, t) => n + t.modules.size, 0)} module versions of ${targets.length} Go artifacts` +
      `${stdlib ? ` and ${stdlib.pin.version}'s standard library` : ""}, by version (whether a binary reaches the vulnerable code is not analysed); newer data: icn-bootstrap lock --advisories`,
  );
  findings.push(...goVulnFindings(all, indexReports(reports)));
  return { lines, findings, targets, missing };
}
