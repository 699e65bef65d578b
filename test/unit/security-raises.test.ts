/**
 * lock-artifacts raising a wrapper's reported dependencies: a file-system Go module proxy
 * (the real go command resolves, downloads and builds from it) and a toy vulnerability
 * database. The fix of the dependency is a pseudo-version the proxy does not serve, so the
 * first release after it is taken; a report without a fix and the group's own module stay,
 * named in the header; the binary is built with the raised dependency.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { indexReports } from "../../builder/check/go-vulns.js";
import type { OsvReport } from "../../builder/check/vulndb.js";
import { ensureArtifacts } from "../../builder/sources/index.js";
import { lockArtifacts } from "../../builder/sources/lock.js";
import type { GroupSpec } from "../../builder/sources/group-spec.js";
import { writeFileProxy, type FakeModule } from "../helpers/goproxy.js";

let root: string;
let goEnv: Record<string, string>;
const lines: string[] = [];
const log = (scope: string, message: string) => void lines.push(`${scope}: ${message}`);

const lib = (version: string): FakeModule => ({
  path: "example.test/lib",
  version,
  files: { "go.mod": "module example.test/lib\n\ngo 1.22\n", "lib.go": `package lib\n\nconst Version = "${version}"\n` },
});
const other: FakeModule = {
  path: "example.test/other",
  version: "v0.3.0",
  files: { "go.mod": "module example.test/other\n\ngo 1.22\n", "other.go": 'package other\n\nconst Name = "other"\n' },
};
const app: FakeModule = {
  path: "example.test/app",
  version: "v1.0.0",
  files: {
    "go.mod": "module example.test/app\n\ngo 1.22\n\nrequire (\n\texample.test/lib v1.0.0\n\texample.test/other v0.3.0\n)\n",
    "cmd/app/main.go":
      'package main\n\nimport (\n\t"fmt"\n\n\t"example.test/lib"\n\t"example.test/other"\n)\n\nfunc main() { fmt.Println(other.Name, "with lib", lib.Version) }\n',
  },
};
const appGroup: GroupSpec = { name: "app", module: "example.test/app", version: "v1.0.0", binaries: { app: "example.test/app/cmd/app" } };

const report = (id: string, module: string, events: object[]): OsvReport => ({ id, aliases: [], summary: id, affected: [{ module, ranges: [events] }] });
const advisories = {
  source: "a toy database",
  index: indexReports([
    // Fixed in a commit after v1.0.0 the proxy serves no version of: v1.1.0 is the first release with it.
    report("GO-2099-0101", "example.test/lib", [{ introduced: "0" }, { fixed: "1.0.1-0.20990101000000-abcdefabcdef" }]),
    report("GO-2099-0102", "example.test/other", [{ introduced: "0" }]),
    report("GO-2099-0103", "example.test/app", [{ introduced: "0" }, { fixed: "1.0.1" }]),
  ]),
};

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-raises-test-"));
  process.env.ICN_BOOTSTRAP_CACHE = join(root, "cache");
  const proxy = await writeFileProxy(join(root, "proxy"), [lib("v1.0.0"), lib("v1.1.0"), lib("v1.2.0"), other, app]);
  goEnv = { GOPROXY: proxy, GOSUMDB: "off", GONOSUMDB: "example.test", GOMODCACHE: join(root, "gomodcache"), GOFLAGS: "-modcacherw" };
}, 120_000);

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("lock-artifacts raises reported dependencies", () => {
  // A Go build with an empty build cache: a minute or more on a busy 2-core machine.
  it("to the first served release with the fix, names what stayed and why, and the binary builds with it", { timeout: 5 * 60_000 }, async () => {
    const lockPath = join(root, "raised", "appliance.lock.yaml");
    await lockArtifacts({ lockPath, groups: [appGroup], goEnv, log, advisories });
    const goMod = await readFile(join(root, "raised/go/app/go.mod"), "utf8");
    expect(goMod).toMatch(/^\texample\.test\/lib v1\.1\.0\b/m);
    expect(goMod).toMatch(/^\texample\.test\/app v1\.0\.0\b/m); // its own fix moves the pin, not a raise
    expect(goMod).toMatch(/^\texample\.test\/other v0\.3\.0\b/m);
    expect(goMod).toContain("// Dependencies raised for known vulnerabilities (a toy database):");
    expect(goMod).toContain("//   example.test/lib v1.0.0 => v1.1.0 (GO-2099-0101)");
    expect(goMod).toContain("//   example.test/other v0.3.0 kept: no fix published for GO-2099-0102");
    expect(goMod.indexOf("// Dependencies raised")).toBeLessThan(goMod.indexOf("\nmodule "));
    expect(lines).toContain("app: raised example.test/lib v1.0.0 -> v1.1.0 (GO-2099-0101)");
    const [built] = await ensureArtifacts({ lockPath, goEnv, log });
    expect(execFileSync(built!.path, { encoding: "utf8" })).toBe("other with lib v1.1.0\n");
  });

  it("keeps a dependency the group holds back, with its reason, and raises none without a database", async () => {
    const kept = join(root, "kept", "appliance.lock.yaml");
    await lockArtifacts({
      lockPath: kept,
      groups: [{ ...appGroup, keepDependencies: { "example.test/lib": "v1.1 does not build with app" } }],
      goEnv,
      log,
      advisories,
    });
    const keptMod = await readFile(join(root, "kept/go/app/go.mod"), "utf8");
    expect(keptMod).toMatch(/^\texample\.test\/lib v1\.0\.0\b/m);
    expect(keptMod).toContain("//   example.test/lib v1.0.0 kept: v1.1 does not build with app");

    const plain = join(root, "plain", "appliance.lock.yaml");
    await lockArtifacts({ lockPath: plain, groups: [appGroup], goEnv, log });
    const plainMod = await readFile(join(root, "plain/go/app/go.mod"), "utf8");
    expect(plainMod).toMatch(/^\texample\.test\/lib v1\.0\.0\b/m);
    expect(plainMod).not.toContain("raised");
    expect(lines.some((l) => /no Go vulnerability database pinned .*dependencies are not raised/.test(l))).toBe(true);
  });

  it("regenerates only the groups named with --only, leaving the other entries as pinned", async () => {
    const lockPath = join(root, "only", "appliance.lock.yaml");
    const second: GroupSpec = { ...appGroup, name: "second" };
    await lockArtifacts({ lockPath, groups: [appGroup, second], goEnv, log, raise: false });
    const before = await readFile(lockPath, "utf8");
    await lockArtifacts({ lockPath, groups: [appGroup, second], goEnv, log, advisories, only: ["second"] });
    expect(await readFile(join(root, "only/go/app/go.mod"), "utf8")).toMatch(/^\texample\.test\/lib v1\.0\.0\b/m);
    expect(await readFile(join(root, "only/go/second/go.mod"), "utf8")).toMatch(/^\texample\.test\/lib v1\.1\.0\b/m);
    const after = await readFile(lockPath, "utf8");
    const entry = (text: string, name: string) => new RegExp(`^  ${name}:\\n(?:    .*\\n)+`, "m").exec(text)?.[0];
    expect(entry(after, "app")).toBe(entry(before, "app"));
    expect(entry(after, "second")).not.toBe(entry(before, "second"));
    await expect(lockArtifacts({ lockPath, groups: [appGroup], goEnv, log, only: ["nope"] })).rejects.toThrow(/no Go group named nope/);
  });
});
