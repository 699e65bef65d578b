/**
 * The gomod source end to end with the real go command, on a tiny module served
 * by a file-system module proxy: lock (wrapper go.mod + go.sum), build, cache hit,
 * corrupted entry repaired, and the bad inputs (version that does not exist, Go too
 * old, go.sum drift).
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContentStore } from "../../builder/cache.js";
import { UserError } from "../../builder/errors.js";
import { ensureArtifacts, loadArtifacts } from "../../builder/sources/index.js";
import type { GroupSpec } from "../../builder/sources/group-spec.js";
import { lockArtifacts } from "../../builder/sources/lock.js";
import { writeFileProxy } from "../helpers/goproxy.js";

let root: string;
let lockPath: string;
let goEnv: Record<string, string>;
const lines: string[] = [];
const log = (scope: string, message: string) => void lines.push(`${scope}: ${message}`);

const hello: GroupSpec = { name: "hello", module: "example.test/hello", version: "v1.0.0", binaries: { hello: "example.test/hello/cmd/hello" } };

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-gomod-test-"));
  process.env.ICN_BOOTSTRAP_CACHE = join(root, "cache");
  const proxy = await writeFileProxy(join(root, "proxy"), [
    {
      path: "example.test/hello",
      version: "v1.0.0",
      files: {
        "go.mod": "module example.test/hello\n\ngo 1.22\n",
        "cmd/hello/main.go": 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from v1.0.0") }\n',
      },
    },
    {
      path: "example.test/hello-tools",
      version: "v1.0.0",
      files: {
        "go.mod": "module example.test/hello-tools\n\ngo 1.22\n",
        "main.go": 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello-tools from v1.0.0") }\n',
      },
    },
    {
      path: "example.test/future",
      version: "v1.0.0",
      files: { "go.mod": "module example.test/future\n\ngo 1.99.0\n", "main.go": "package main\n\nfunc main() {}\n" },
    },
  ]);
  goEnv = { GOPROXY: proxy, GOSUMDB: "off", GONOSUMDB: "example.test", GOMODCACHE: join(root, "gomodcache"), GOFLAGS: "-modcacherw" };
  lockPath = join(root, "appliance.lock.yaml");
  await writeFile(lockPath, "version: 1\ndebian: {kept: true}\n");
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("gomod source", () => {
  it("generates the wrapper module and pins it in the lock file, keeping the other sections", async () => {
    const artifacts = await lockArtifacts({ lockPath, groups: [hello], goEnv, log });
    const entry = artifacts.hello!;
    expect(entry).toMatchObject({
      source: "gomod",
      module: "example.test/hello",
      version: "v1.0.0",
      dir: "go/hello",
      binaries: { hello: "example.test/hello/cmd/hello" },
    });
    const goMod = await readFile(join(root, "go/hello/go.mod"), "utf8");
    expect(goMod).toMatch(/^require example\.test\/hello v1\.0\.0\b/m);
    expect(goMod).toMatch(/^go 1\.24$/m); // raised to what tool directives need
    const goSum = await readFile(join(root, "go/hello/go.sum"), "utf8");
    expect(goSum).toMatch(/^example\.test\/hello v1\.0\.0 h1:/m);
    expect(await readFile(lockPath, "utf8")).toMatch(/debian:\s+kept: true/);
    expect((await loadArtifacts(lockPath)).artifacts.hello).toEqual(entry);
  });

  it("builds the binary, then serves it from the cache", async () => {
    const [first] = await ensureArtifacts({ lockPath, goEnv, log });
    expect(first).toMatchObject({ name: "hello", status: "built", version: "v1.0.0" });
    expect(execFileSync(first!.path, { encoding: "utf8" })).toBe("hello from v1.0.0\n");

    const started = Date.now();
    const [second] = await ensureArtifacts({ lockPath, goEnv, log });
    expect(second).toMatchObject({ status: "cached", sha256: first!.sha256, path: first!.path });
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it("detects a corrupted cache entry, says so, and rebuilds it", async () => {
    const [before] = await ensureArtifacts({ lockPath, goEnv, log });
    await writeFile(before!.path, "not a binary");
    const [after] = await ensureArtifacts({ lockPath, goEnv, log });
    expect(after!.status).toBe("built");
    expect(after!.repaired).toMatch(/cache entry for hello is corrupted/);
    expect(lines.some((l) => /^hello: cache entry for hello is corrupted.*rebuilding$/.test(l))).toBe(true);
    expect(after!.sha256).toBe(before!.sha256); // reproducible build
    expect(await new ContentStore().get(after!.sha256)).toBe(after!.path);
  });

  it("builds commands of a project's second module at the same version (alsoRequires)", async () => {
    const lock4 = join(root, "two-modules", "appliance.lock.yaml");
    const both: GroupSpec = {
      ...hello,
      name: "both",
      alsoRequires: ["example.test/hello-tools"],
      binaries: { hello: "example.test/hello/cmd/hello", "hello-tools": "example.test/hello-tools" },
    };
    await lockArtifacts({ lockPath: lock4, groups: [both], goEnv, log });
    const goMod = await readFile(join(root, "two-modules/go/both/go.mod"), "utf8");
    expect(goMod).toMatch(/^\texample\.test\/hello v1\.0\.0\b/m);
    expect(goMod).toMatch(/^\texample\.test\/hello-tools v1\.0\.0\b/m);
    const built = await ensureArtifacts({ lockPath: lock4, goEnv, log });
    expect(built.map((b) => b.name).sort()).toEqual(["hello", "hello-tools"]);
    expect(execFileSync(built.find((b) => b.name === "hello-tools")!.path, { encoding: "utf8" })).toBe("hello-tools from v1.0.0\n");
  });

  it("fails on a module version that does not exist, naming the artifact and the fix", async () => {
    const lock2 = join(root, "missing", "appliance.lock.yaml");
    const error = await lockArtifacts({ lockPath: lock2, groups: [{ ...hello, version: "v1.9.9" }], goEnv, log }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toMatch(/^hello: .*example\.test\/hello@v1\.9\.9/);
    expect((error as UserError).hint).toMatch(/lock-artifacts/);
  });

  it("refuses a Go toolchain older than the module needs, naming both versions", async () => {
    const lock3 = join(root, "future", "appliance.lock.yaml");
    const error = await lockArtifacts({
      lockPath: lock3,
      groups: [{ name: "future", module: "example.test/future", version: "v1.0.0", binaries: { future: "example.test/future" } }],
      goEnv,
      log,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toMatch(/^future: .*1\.99\.0/);
    expect((error as UserError).hint).toMatch(/install Go 1\.99\.0 or newer/);

    // The same check runs before a build: a wrapper whose go directive is ahead of the toolchain.
    const goModPath = join(root, "go/hello/go.mod");
    const goMod = await readFile(goModPath, "utf8");
    await writeFile(goModPath, goMod.replace(/^go .*$/m, "go 1.99.0"));
    try {
      const buildError = await ensureArtifacts({ lockPath, goEnv, log }).catch((e: unknown) => e);
      expect(buildError).toBeInstanceOf(UserError);
      expect((buildError as UserError).message).toMatch(/^hello: go\/hello\/go\.mod needs Go 1\.99\.0 or newer, but '.*' is go1\.\d+/);
    } finally {
      await writeFile(goModPath, goMod);
    }
  });

  it("refuses a go.sum that differs from the one the lock file pins", async () => {
    const goSumPath = join(root, "go/hello/go.sum");
    const goSum = await readFile(goSumPath, "utf8");
    await writeFile(goSumPath, goSum + "example.test/other v1.0.0 h1:AAAA=\n");
    try {
      const error = await ensureArtifacts({ lockPath, goEnv, log }).catch((e: unknown) => e);
      expect((error as UserError).message).toMatch(/^hello: .*go\.sum does not match the lock file/);
    } finally {
      await writeFile(goSumPath, goSum);
    }
  });
});
