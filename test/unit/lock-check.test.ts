/**
 * `icn-bootstrap lock --check`, the real command: on a toy definition and lock (a toy
 * vulnerability database in the cache) its exit status and lines tell "vulnerable", "out of
 * support", "support ends soon" and "unknown" apart; and on the repository's own pins,
 * offline with no network at all, it completes and reports (whatever advisories are new).
 */
import { execa } from "execa";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContentStore } from "../../builder/cache.js";
import { CHECK_EXIT } from "../../builder/debian/check.js";
import { VULNDB_MODULE } from "../../builder/check/vulndb.js";
import { loadLock, saveLock } from "../../builder/lockfile.js";
import { REPO, runCli } from "../helpers/cli.js";
import { zipStored } from "../helpers/goproxy.js";

const DB_VERSION = "v0.0.0-20261001000000-abcdefabcdef";
const osv = (id: string, module: string, fixed: string) =>
  JSON.stringify({
    id,
    aliases: [`CVE-2099-${id.slice(-4)}`],
    affected: [{ package: { name: module }, ranges: [{ type: "SEMVER", events: [{ introduced: "0" }, { fixed }] }] }],
  });
const day = (offsetDays: number) => new Date(Date.now() + offsetDays * 86_400_000).toISOString().slice(0, 10);

let work: string;
let definitionPath: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-lock-check-"));
  const zip = join(work, "vulndb.zip");
  const prefix = `${VULNDB_MODULE}@${DB_VERSION}`;
  await writeFile(
    zip,
    zipStored([
      [`${prefix}/go.mod`, Buffer.from(`module ${VULNDB_MODULE}\n`)],
      [`${prefix}/data/osv/GO-2099-0001.json`, Buffer.from(osv("GO-2099-0001", "example.test/app", "1.1.4"))],
    ]),
  );
  const sha256 = await new ContentStore(join(work, "cache", "sha256")).put(zip);
  for (const [name, module, version] of [
    ["app", "example.test/app", "v1.1.0"],
    ["calm", "example.test/calm", "v2.0.0"],
  ] as const) {
    await mkdir(join(work, "go", name), { recursive: true });
    await writeFile(join(work, "go", name, "go.mod"), `module icn-bootstrap.local/go/${name}\n\ngo 1.24\n\nrequire ${module} ${version}\n`);
  }
  const gomod = (module: string, version: string) => ({
    source: "gomod",
    module,
    version,
    dir: `go/${module.split("/")[1]}`,
    goSum: `sha256:${"1".repeat(64)}`,
    binaries: { [module.split("/")[1]!]: module },
    profile: "default",
  });
  const lock = {
    version: 2,
    debian: {
      suite: "toy",
      architecture: "amd64",
      components: ["main"],
      archives: [{ name: "main", url: "http://127.0.0.1:9/debian", suites: ["toy"], snapshotName: "debian" }],
      snapshot: "",
      indexes: { toy: "Mon, 01 Jun 2026 00:00:00 UTC" },
      requested: [],
      packages: {},
    },
    artifacts: { app: gomod("example.test/app", "v1.1.0"), calm: gomod("example.test/calm", "v2.0.0") },
    advisories: { goVulndb: { module: VULNDB_MODULE, version: DB_VERSION, sha256, time: "2026-10-01T00:00:00Z" } },
  };
  definitionPath = join(work, "toy.yaml");
  await writeFile(join(work, "toy.lock.yaml"), yaml.dump(lock));
  await writeFile(
    definitionPath,
    yaml.dump({
      name: "toy",
      debian: { suite: "toy" },
      kubernetes: { enabled: false },
      support: [
        { pin: "artifact:app", series: "1.1", endOfLife: day(-10), source: "https://example.test/app/releases" },
        { pin: "artifact:calm", series: "2.0", endOfLife: day(30), source: "https://example.test/calm/policy" },
      ],
    }),
  );
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe("icn-bootstrap lock --check", () => {
  it("a toy definition: each verdict on its own line with the component, the pin and the move, and the exit bits that tell them apart", async () => {
    const cli = await runCli(["lock", "--check", "--offline", "--definition", definitionPath], { ICN_BOOTSTRAP_CACHE: join(work, "cache") });
    expect(cli.exitCode, cli.all).toBe(CHECK_EXIT.unknown | CHECK_EXIT.vulnerable | CHECK_EXIT.outOfSupport);
    expect(cli.stdout).toMatch(/Debian packages .*\n {2}not checked: --offline/);
    expect(cli.stdout).toContain(`Go vulnerability database: ${VULNDB_MODULE} ${DB_VERSION}, reports up to 2026-10-01`);
    expect(cli.stdout).toContain(
      `OUT OF SUPPORT: app (example.test/app v1.1.0): upstream support of the 1.1 line ended ${day(-10)} (https://example.test/app/releases)\n    move: `,
    );
    expect(cli.stdout).toContain("VULNERABLE: app (example.test/app v1.1.0): GO-2099-0001 (CVE-2099-0001); fixed in v1.1.4\n    move: ");
    expect(cli.stdout).toMatch(/move: set artifacts\.app \(url, sha256, version v1\.1\.4\) in the lock file/);
    expect(cli.stdout).toContain(`SUPPORT ENDS SOON: calm (example.test/calm v2.0.0): upstream support of the 2.0 line ends ${day(30)}, in 30 days`);
    expect(cli.stdout).not.toMatch(/VULNERABLE: calm/);
    // Offline with no kept answer: newer releases are unknown, never claimed absent.
    expect(cli.stdout).toMatch(/UNKNOWN: app \(example\.test\/app v1\.1\.0\), calm \(example\.test\/calm v2\.0\.0\): newer releases not known/);
    expect(cli.stdout).toContain("exit status 194: out of support, vulnerable, some data unknown");
  });

  it("offline without the pinned database in the cache: the Go pins are unknown, never fine", async () => {
    const cli = await runCli(["lock", "--check", "--offline", "--definition", definitionPath], { ICN_BOOTSTRAP_CACHE: join(work, "empty-cache") });
    expect(cli.exitCode, cli.all).toBe(CHECK_EXIT.unknown | CHECK_EXIT.outOfSupport);
    expect(cli.stdout).toContain(`Go vulnerability database: ${VULNDB_MODULE} ${DB_VERSION}, reports up to 2026-10-01`);
    expect(cli.stdout).toContain("not available (not in this machine's cache and --offline)");
    expect(cli.stdout).toMatch(
      /UNKNOWN: app \(example\.test\/app v1\.1\.0\), calm \(example\.test\/calm v2\.0\.0\), Go toolchain [^\n]*: vulnerabilities not known: the pinned Go vulnerability database is not available/,
    );
    expect(cli.stdout).not.toContain("VULNERABLE");
  });

  it("the lock file keeps the pinned database through a load and save (as lock, lock --update and lock-images write it)", async () => {
    const path = join(work, "toy.lock.yaml");
    const lock = await loadLock(path);
    expect(lock.advisories?.goVulndb).toMatchObject({ module: VULNDB_MODULE, version: DB_VERSION });
    const copy = join(work, "copy.lock.yaml");
    await saveLock(copy, lock);
    expect((await loadLock(copy)).advisories).toEqual(lock.advisories);
    await writeFile(copy, (await readFile(copy, "utf8")).replace(/sha256: [0-9a-f]{64}/, "sha256: nothex"));
    await expect(loadLock(copy)).rejects.toThrow(/advisories\.goVulndb\.sha256: 64 lowercase hex digits/);
  });

  it("--help documents every exit bit", async () => {
    const cli = await runCli(["lock", "--help"]);
    for (const [bit, words] of [
      [CHECK_EXIT.unknown, "unknown"],
      [CHECK_EXIT.securityUpdates, "updates waiting"],
      [CHECK_EXIT.vulnerable, "vulnerable"],
      [CHECK_EXIT.outOfSupport, "out of support"],
    ] as const)
      expect(cli.stdout).toMatch(new RegExp(`\\n\\s+${bit}\\s+${words}`));
  });

  it("the repository's own pins, offline and without any network: completes and reports", async () => {
    // In a network namespace with no interface up where the machine allows it: nothing can be fetched.
    const isolated = (await execa("unshare", ["--net", "true"], { reject: false })).exitCode === 0;
    const run = await execa(
      isolated ? "unshare" : "node",
      [...(isolated ? ["--net", "node"] : []), "--import", "tsx", resolve(REPO, "builder/cli.ts"), "lock", "--check", "--offline"],
      { cwd: REPO, reject: false, all: true },
    );
    const cli = { exitCode: run.exitCode, stdout: String(run.stdout), all: String(run.all) };
    expect(cli.exitCode, cli.all).not.toBe(1);
    expect(cli.exitCode! & CHECK_EXIT.unknown).toBe(CHECK_EXIT.unknown); // Debian's index is not read offline
    expect(cli.stdout).toContain("Support windows (the definition's support:");
    expect(cli.stdout).toMatch(/Go vulnerability database: golang\.org\/x\/vulndb v\S+, reports up to \d{4}-\d{2}-\d{2}/);
    expect(cli.stdout).toMatch(/PyPI \(\d+ pins of the image recipes\)/);
    expect(cli.stdout).toContain("Container images: their Debian packages are the lock's images.debian sets");
    expect(cli.stdout).toContain(`exit status ${cli.exitCode}`);
    // Every finding line names a component with its pin, and the next line how to move it.
    const lines = cli.stdout.split("\n");
    lines.forEach((line, i) => {
      if (/^(OUT OF SUPPORT|VULNERABLE|UPDATE WAITING|SUPPORT ENDS SOON): /.test(line)) {
        expect(line).toMatch(/^[A-Z ]+: .+ \(.+\): .+/);
        expect(lines[i + 1]).toMatch(/^ {4}move: \S/);
      }
    });
  }, 120_000);
});
