/**
 * lock --check's Go part: a toy Go vulnerability database (a golang.org/x/vulndb module
 * with data/osv/ reports, served by a file-system Go module proxy to the real go command),
 * pinned, stored, read back offline, and matched against toy module versions.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContentStore } from "../../builder/cache.js";
import type { ComponentPin } from "../../builder/check/findings.js";
import { affectedBy, goModModules, goVulnFindings, indexReports } from "../../builder/check/go-vulns.js";
import { newestGoVulndb, pinnedGoVulndb, readGoVulndb, VULNDB_MODULE, type GoVulndbPin } from "../../builder/check/vulndb.js";
import { writeFileProxy } from "../helpers/goproxy.js";

const VERSION = "v0.0.0-20260301120000-abcdefabcdef";
const report = (id: string, module: string, events: object[], extra: object = {}) =>
  JSON.stringify({
    schema_version: "1.3.1",
    id,
    aliases: [`CVE-2099-${id.slice(-4)}`],
    summary: `${id} in ${module}`,
    affected: [{ package: { name: module, ecosystem: "Go" }, ranges: [{ type: "SEMVER", events }] }],
    ...extra,
  });

const TOY_DB = {
  "go.mod": `module ${VULNDB_MODULE}\n\ngo 1.22\n`,
  "data/osv/GO-2099-0001.json": report("GO-2099-0001", "example.test/app", [{ introduced: "0" }, { fixed: "1.2.0" }]),
  "data/osv/GO-2099-0002.json": report("GO-2099-0002", "example.test/dep", [{ introduced: "0.3.0" }]),
  "data/osv/GO-2099-0003.json": report("GO-2099-0003", "example.test/app", [{ introduced: "0" }, { fixed: "1.1.5" }], { withdrawn: "2099-01-02T00:00:00Z" }),
  "data/osv/GO-2099-0004.json": report("GO-2099-0004", "stdlib", [{ introduced: "0" }, { fixed: "1.26.3" }, { introduced: "1.27.0-0" }, { fixed: "1.27.1" }]),
  "data/reports/GO-2099-0001.yaml": "id: GO-2099-0001\n",
};

const pin = (component: string, version: string): ComponentPin => ({
  key: `artifact:${component}`,
  component,
  version,
  pin: `example.test/${component} ${version}`,
  move: (to) => `move ${component} to ${to ?? "?"}`,
});

let root: string;
let goEnv: Record<string, string>;
let store: ContentStore;
let pinned: GoVulndbPin;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-go-vulns-"));
  process.env.ICN_BOOTSTRAP_CACHE = join(root, "cache");
  store = new ContentStore(join(root, "cache", "sha256"));
  const proxy = await writeFileProxy(join(root, "proxy"), [{ path: VULNDB_MODULE, version: VERSION, files: TOY_DB }]);
  goEnv = { GOPROXY: proxy, GOSUMDB: "off", GOMODCACHE: join(root, "gomodcache"), GOFLAGS: "-modcacherw" };
  pinned = await newestGoVulndb(store, { goEnv });
}, 120_000);

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("the pinned Go vulnerability database", () => {
  it("pins the newest version the proxy serves by its zip's sha256 and commit time, and stores it", async () => {
    expect(pinned).toMatchObject({ module: VULNDB_MODULE, version: VERSION, time: "2026-01-01T00:00:00Z" });
    expect(await store.has(pinned.sha256)).toBe(true);
  });

  it("reads the stored database offline, leaving withdrawn reports out", async () => {
    const zip = await pinnedGoVulndb(pinned, { offline: true, store });
    expect(zip).toBe(store.pathOf(pinned.sha256));
    const ids = (await readGoVulndb(zip!)).map((r) => r.id).sort();
    expect(ids).toEqual(["GO-2099-0001", "GO-2099-0002", "GO-2099-0004"]);
  });

  it("a damaged database is an error naming the file and the fix", async () => {
    const damaged = join(root, "damaged.zip");
    await writeFile(damaged, "PK not really a zip");
    await expect(readGoVulndb(damaged)).rejects.toThrow(/damaged\.zip: not a readable zip archive.*/);
  });

  it("offline without it in the cache: nothing (the check says unknown); online: downloads and verifies it against the pin", async () => {
    const empty = new ContentStore(join(root, "empty", "sha256"));
    expect(await pinnedGoVulndb(pinned, { offline: true, store: empty })).toBeUndefined();
    expect(await pinnedGoVulndb(pinned, { offline: false, store: empty, goEnv })).toBe(empty.pathOf(pinned.sha256));
    const wrong = { ...pinned, sha256: "0".repeat(64) };
    await expect(pinnedGoVulndb(wrong, { offline: false, store: new ContentStore(join(root, "other", "sha256")), goEnv })).rejects.toThrow(
      new RegExp(`sha256 mismatch for ${VULNDB_MODULE}@${VERSION}: expected 0{64}, got ${pinned.sha256}`),
    );
  });
});

describe("matching pinned module versions", () => {
  it("a pinned module in a report's range is vulnerable, with the version that fixes it as the move; at the fix it is fine", async () => {
    const index = indexReports(await readGoVulndb((await pinnedGoVulndb(pinned, { offline: true, store }))!));
    const old = goVulnFindings([{ pin: pin("app", "v1.1.0"), main: "example.test/app", modules: new Map([["example.test/app", "v1.1.0"]]) }], index);
    expect(old).toEqual([
      {
        verdict: "vulnerable",
        component: "app",
        pin: "example.test/app v1.1.0",
        detail: "GO-2099-0001 (CVE-2099-0001); fixed in v1.2.0",
        move: "move app to v1.2.0",
      },
    ]);
    expect(goVulnFindings([{ pin: pin("app", "v1.2.0"), main: "example.test/app", modules: new Map([["example.test/app", "v1.2.0"]]) }], index)).toEqual([]);
  });

  it("a dependency with a report and no fix is named, with why the pin stays; the standard library is matched by the toolchain's version", async () => {
    const index = indexReports(await readGoVulndb((await pinnedGoVulndb(pinned, { offline: true, store }))!));
    const [dep] = goVulnFindings(
      [
        {
          pin: pin("app", "v1.2.0"),
          main: "example.test/app",
          modules: new Map([
            ["example.test/app", "v1.2.0"],
            ["example.test/dep", "v0.3.1"],
          ]),
        },
      ],
      index,
    );
    expect(dep!.detail).toMatch(/1 module it builds with has reports .*example\.test\/dep v0\.3\.1 \(GO-2099-0002; no fix published for GO-2099-0002\)/);
    expect(dep!.move).toBe("a release of app that requires the fixed versions: move app to ?");
    const go = (version: string) => goVulnFindings([{ pin: pin("go", version), modules: new Map([["stdlib", version]]) }], index);
    expect(go("1.26.2")[0]!.detail).toBe("the standard library go1.26.2: GO-2099-0004 (CVE-2099-0004); fixed in go1.26.3");
    expect(go("1.26.2")[0]!.move).toBe("move go to go1.26.3");
    expect(go("1.26.3")).toEqual([]);
    expect(go("1.27.0")[0]!.detail).toMatch(/fixed in go1\.27\.1$/);
  });

  it("ranges: introduced inclusive, fixed exclusive, last_affected inclusive, pre-releases before their release", () => {
    const range = [
      [{ introduced: "1.0.0" }, { fixed: "1.4.2" }],
      [{ introduced: "2.0.0-rc.1" }, { last_affected: "2.1.0" }],
    ];
    expect(affectedBy(range, "v0.9.9")).toBeUndefined();
    expect(affectedBy(range, "v1.0.0")).toEqual({ fixed: "1.4.2" });
    expect(affectedBy(range, "v1.4.1")).toEqual({ fixed: "1.4.2" });
    expect(affectedBy(range, "v1.4.2")).toBeUndefined();
    expect(affectedBy(range, "v2.0.0-beta.1")).toBeUndefined();
    expect(affectedBy(range, "v2.0.0")).toEqual({ fixed: undefined });
    expect(affectedBy(range, "v2.1.0")).toEqual({ fixed: undefined });
    expect(affectedBy(range, "v2.1.1")).toBeUndefined();
  });

  it("a wrapper go.mod's modules are its requirements after its replace directives", () => {
    const goMod = `module icn-bootstrap.local/go/x\n\ngo 1.24\n\nrequire example.test/app v1.1.0\n\nrequire (\n\texample.test/dep v0.3.1 // indirect\n\texample.test/old v1.0.0 // indirect\n)\n\nreplace example.test/old => example.test/new v1.0.5\n\nreplace example.test/dep v0.2.0 => example.test/dep v0.2.1\n`;
    expect(Object.fromEntries(goModModules(goMod))).toEqual({ "example.test/app": "v1.1.0", "example.test/dep": "v0.3.1", "example.test/new": "v1.0.5" });
  });
});
