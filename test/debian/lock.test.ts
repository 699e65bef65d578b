/**
 * Debian pins are files: against a signed archive made by the test and served on
 * 127.0.0.1 (helpers/debian-archive.ts), with a snapshot-service stand-in beside it.
 * The archive moves on, loses files and has bytes changed; the pinned install must stay
 * exactly the lock, or fail before anything is built, naming the package and the fix.
 */
import { createHash } from "node:crypto";
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContentStore } from "../../builder/cache.js";
import { checkLock, CHECK_EXIT, exitStatus } from "../../builder/debian/check.js";
import { ensureDebs } from "../../builder/debian/fetch.js";
import { readIndexes } from "../../builder/debian/index.js";
import { mmdebstrap, type PackageChoice } from "../../builder/debian/mmdebstrap.js";
import { describeMoved, movedPackages, newestPin, pinInstalled, pinsToAdd } from "../../builder/debian/pins.js";
import { readArchives } from "../../builder/debian/resolve.js";
import type { DebianSources, PinnedPackage } from "../../builder/debian/schema.js";
import { UserError } from "../../builder/errors.js";
import { LOCK_VERSION, loadLock, saveLock, type LockFile } from "../../builder/lockfile.js";
import type { StageRun } from "../../builder/stage.js";
import { installedFromPins, requestedPackages } from "../../builder/stages/rootfs.js";
import { parseDpkgStatus } from "../../builder/debian/dpkg-status.js";
import { SnapshotStandIn, TestKey, ToyArchive, readInstalledVersion } from "../helpers/debian-archive.js";
import { runCli } from "../helpers/cli.js";
import { parseDefinition } from "../../builder/definition.js";

const LIB = { name: "icn-lib", version: "1.0-1" };
const HELLO_1 = { name: "icn-hello", version: "1.0-1", depends: "icn-lib (>= 1.0)" };
const HELLO_2 = { name: "icn-hello", version: "1.0-2", depends: "icn-lib (>= 1.0)" };
const HELLO_SECURITY = { name: "icn-hello", version: "1.0-3", depends: "icn-lib (>= 1.0)" };

const exec: StageRun["exec"] = async (file, args, options = {}) => {
  const result = await execa(file, args, { ...options, all: true, reject: false });
  if (result.failed) throw new Error(`${file} failed: ${String(result.all).split("\n").slice(-10).join("\n")}`);
  return String(result.stdout);
};

describe("Debian packages pinned as files", () => {
  let work: string;
  let key: TestKey;
  let mirror: ToyArchive;
  let security: ToyArchive;
  let snapshot: SnapshotStandIn;
  let sources: DebianSources;
  let pins: Record<string, PinnedPackage>;
  let store: ContentStore;
  let definitionPath: string;
  let lockPath: string;

  const clearCache = () => rm(join(work, "cache"), { recursive: true, force: true });
  const lock = (): LockFile => ({
    version: LOCK_VERSION,
    debian: { ...sources, requested: requestedPackages(parseDefinition(TOY_DEFINITION, "toy")), packages: pins },
    artifacts: {},
  });
  /** The pinned install, as the build stages do it (chrootless: the toy set has no dpkg of its own). */
  async function install(choice: PackageChoice): Promise<{ root: string; installed: Record<string, string> }> {
    const root = await mkdtemp(join(work, "root-"));
    await mmdebstrap(exec, { sources, variant: "custom", mode: "chrootless", format: "directory", target: root }, choice);
    return { root, installed: parseDpkgStatus(await readFile(join(root, "var/lib/dpkg/status"), "utf8")) };
  }

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "icn-debian-lock-"));
    process.env.ICN_BOOTSTRAP_CACHE = join(work, "cache");
    store = new ContentStore(join(work, "cache", "sha256"));
    key = await TestKey.create();
    mirror = new ToyArchive(join(work, "mirror"), key);
    security = new ToyArchive(join(work, "security"), key, "pool/updates/main");
    snapshot = new SnapshotStandIn(join(work, "snapshot"));
    await mkdir(join(work, "debs"));
    await mirror.publish("toy", [LIB, HELLO_1], join(work, "debs"));
    await mirror.publish("toy-updates", [], join(work, "debs"));
    await security.publish("toy-security", [], join(work, "debs"));
    await copyFile(join(mirror.root, mirror.poolPath(HELLO_1)), join(work, "hello-1.0-1.deb"));
    await Promise.all([mirror.start(), security.start(), snapshot.start()]);
    const resolution = await readArchives({
      suite: "toy",
      architecture: "amd64",
      components: ["main"],
      archives: [
        { name: "main", url: mirror.url, suites: ["toy", "toy-updates"], snapshotName: "debian" },
        { name: "security", url: security.url, suites: ["toy-security"], snapshotName: "debian-security" },
      ],
      snapshot: snapshot.url,
      keyring: key.keyring,
    });
    sources = resolution.sources;
    const resolved = await install({ resolve: ["icn-hello"] });
    pins = pinInstalled(resolved.installed, resolution.indexes);
    definitionPath = join(work, "toy.yaml");
    lockPath = join(work, "toy.lock.yaml");
    await writeFile(definitionPath, TOY_DEFINITION);
    await saveLock(lockPath, lock());
  }, 120_000);

  afterAll(async () => {
    await Promise.all([mirror?.stop(), security?.stop(), snapshot?.stop()]);
    await key?.dispose();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("lock pins every installed package as the file the signed index lists, with the index's date", async () => {
    const hello = await readFile(join(mirror.root, mirror.poolPath(HELLO_1)));
    expect(pins["icn-hello"]).toEqual({
      version: "1.0-1",
      architecture: "all",
      filename: "pool/main/i/icn-hello/icn-hello_1.0-1_all.deb",
      sha256: createHash("sha256").update(hello).digest("hex"),
      size: hello.length,
      archive: "main",
      suite: "toy",
    });
    expect(pins["icn-lib"]?.version).toBe("1.0-1");
    expect(Object.keys(pins).sort()).toEqual(["icn-hello", "icn-lib"]);
    expect(sources.indexes.toy).toMatch(/\d{4} \d\d:\d\d:\d\d/);
    const written = await loadLock(lockPath);
    expect(written.debian.packages["icn-hello"]).toEqual(pins["icn-hello"]);
  });

  it("refuses an index whose signature does not verify against the keyring", async () => {
    const other = await TestKey.create();
    try {
      const error = await readIndexes(sources.archives, { ...sources, keyring: other.keyring }).catch((e) => e);
      expect(error).toBeInstanceOf(UserError);
      expect(error.message).toMatch(/signature of .*\/dists\/toy(-updates|-security)?\/InRelease does not verify against .*: .*No public key/);
    } finally {
      await other.dispose();
    }
  });

  it("installs exactly the pinned old version after the archive moved on (old file left in the pool)", async () => {
    await mirror.publish("toy", [LIB, HELLO_2], join(work, "debs"));
    await clearCache();
    const origins = await ensureDebs(pins, sources, { store });
    expect(origins.find((o) => o.name === "icn-hello")).toMatchObject({ from: "pool", url: `${mirror.url}/pool/main/i/icn-hello/icn-hello_1.0-1_all.deb` });
    const { root, installed } = await install({ pinned: pins });
    expect(installed).toEqual({ "icn-hello": "1.0-1", "icn-lib": "1.0-1" });
    expect(await readInstalledVersion(root, "icn-hello")).toBe("icn-hello 1.0-1");
    // The result names the real archives, not the local repository it was installed from.
    expect(await readFile(join(root, "etc/apt/sources.list"), "utf8")).toBe(
      `deb ${mirror.url} toy main\ndeb ${mirror.url} toy-updates main\ndeb ${security.url} toy-security main\n`,
    );

    const age = await checkLock(lock(), await readIndexes(sources.archives, sources), store);
    expect(age.pins.map((p) => [p.name, p.state])).toEqual([
      ["icn-hello", "pool"],
      ["icn-lib", "indexed"],
    ]);
    expect(exitStatus(age)).toBe(CHECK_EXIT.notIndexed);
  });

  it("a root made on its own (a test's single stage, the cgo toolchain), before any build fetched the lock's files, fetches its set's first", async () => {
    await clearCache();
    expect(await store.has(pins["icn-hello"]!.sha256)).toBe(false);
    const { installed } = await install({ pinned: pins });
    expect(installed).toEqual({ "icn-hello": "1.0-1", "icn-lib": "1.0-1" });
    for (const pin of Object.values(pins)) expect(await store.has(pin.sha256), pin.filename).toBe(true);
    // Without the index dates (nowhere to fetch from) a missing file still fails, named.
    await clearCache();
    const { indexes: _indexes, ...withoutIndexes } = sources;
    const root = await mkdtemp(join(work, "root-"));
    const error = await mmdebstrap(
      exec,
      { sources: withoutIndexes, variant: "custom", mode: "chrootless", format: "directory", target: root },
      { pinned: pins },
    ).catch((e: Error) => e);
    expect(String(error)).toMatch(/icn-(hello|lib) 1\.0-1 is not in the cache/);
  });

  it("takes a file gone from the pool from the snapshot archive at the recorded index date", async () => {
    const poolFile = join(mirror.root, mirror.poolPath(HELLO_1));
    await snapshot.keep("debian", mirror.poolPath(HELLO_1), poolFile);
    await rm(poolFile);
    await clearCache();
    const origins = await ensureDebs(pins, sources, { store });
    const hello = origins.find((o) => o.name === "icn-hello")!;
    expect(hello.from).toBe("snapshot");
    expect(hello.url).toMatch(new RegExp(`^${snapshot.url}/debian/\\d{8}T\\d{6}Z/pool/main/i/icn-hello/icn-hello_1.0-1_all.deb$`));
    const { installed } = await install({ pinned: pins });
    expect(installed["icn-hello"]).toBe("1.0-1");

    const cli = await runCli(["lock", "--check", "--definition", definitionPath], { ICN_BOOTSTRAP_CACHE: join(work, "cache") });
    expect(cli.exitCode, cli.all).toBe(CHECK_EXIT.notIndexed);
    expect(cli.stdout).toMatch(/1 still listed by today's index/);
    expect(cli.stdout).toMatch(/0 only in the pool/);
    expect(cli.stdout).toMatch(/1 only in the snapshot archive/);
    expect(cli.stdout).toMatch(/snapshot: icn-hello 1\.0-1/);
  });

  it("refuses a file whose bytes changed in the pool, naming the package and both hashes", async () => {
    await rm(join(snapshot.root, "debian"), { recursive: true, force: true });
    const poolFile = join(mirror.root, mirror.poolPath(HELLO_1));
    await mkdir(join(work, "evil"), { recursive: true });
    const { buildDeb } = await import("../helpers/debian-archive.js");
    await writeFile(poolFile, await readFile(await buildDeb(join(work, "evil"), { ...HELLO_1, payload: "replaced\n" })));
    const actual = createHash("sha256")
      .update(await readFile(poolFile))
      .digest("hex");
    await clearCache();
    const error = await ensureDebs(pins, sources, { store }).catch((e) => e);
    expect(error).toBeInstanceOf(UserError);
    expect(error.message).toContain("icn-hello 1.0-1");
    expect(error.message).toContain(`sha256 ${actual}`);
    expect(error.message).toContain(`not the pinned ${pins["icn-hello"]!.sha256}`);
    expect(await store.has(actual)).toBe(false);
    expect(await store.has(pins["icn-hello"]!.sha256)).toBe(false);
  });

  it("fails a build before any stage when a file is gone everywhere, naming it, every place tried and the fix", async () => {
    await rm(join(mirror.root, mirror.poolPath(HELLO_1)));
    await clearCache();
    const build = await runCli(["build", "--definition", definitionPath, "--out", join(work, "out")], { ICN_BOOTSTRAP_CACHE: join(work, "cache") });
    expect(build.exitCode).toBe(1);
    expect(build.stderr).toContain("1 pinned Debian package cannot be had from any place (nothing was built)");
    expect(build.stderr).toContain("icn-hello 1.0-1 (pool/main/i/icn-hello/icn-hello_1.0-1_all.deb");
    expect(build.stderr).toContain(`pool ${mirror.url}/pool/main/i/icn-hello/icn-hello_1.0-1_all.deb: HTTP 404`);
    expect(build.stderr).toMatch(new RegExp(`snapshot ${snapshot.url}/debian/\\d{8}T\\d{6}Z/pool/main/i/icn-hello/icn-hello_1\\.0-1_all\\.deb: HTTP 404`));
    expect(build.stderr).toContain("fix: re-pin just it with 'icn-bootstrap lock --update icn-hello'");
    expect(build.stderr).not.toMatch(/rootfs\s+started|reused/);
    expect((await loadLock(lockPath)).debian.packages).toEqual(pins); // a build never rewrites the lock

    const age = await checkLock(lock(), await readIndexes(sources.archives, sources), store);
    expect(age.pins.find((p) => p.name === "icn-hello")?.state).toBe("gone");
    expect(exitStatus(age) & CHECK_EXIT.gone).toBe(CHECK_EXIT.gone);
  });

  it("lock --check names pinned packages with a newer version in the security archive; --update picks it", async () => {
    await security.publish("toy-security", [HELLO_SECURITY], join(work, "debs"));
    const indexes = await readIndexes(sources.archives, sources);
    const age = await checkLock(lock(), indexes, store);
    expect(age.securityUpdates).toEqual([{ name: "icn-hello", from: "1.0-1", to: "1.0-3" }]);
    expect(exitStatus(age)).toBe(CHECK_EXIT.gone | CHECK_EXIT.securityUpdates);

    const newest = (await newestPin(indexes, "icn-hello"))!;
    expect(newest).toMatchObject({
      version: "1.0-3",
      archive: "security",
      suite: "toy-security",
      filename: "pool/updates/main/i/icn-hello/icn-hello_1.0-3_all.deb",
    });
    expect(describeMoved(movedPackages(pins, { ...pins, "icn-hello": newest }))).toEqual(["icn-hello: 1.0-1 -> 1.0-3 (toy-security)"]);
    await ensureDebs({ "icn-hello": newest }, sources, { store });
    const { installed } = await install({ pinned: { ...pins, "icn-hello": newest } });
    expect(installed["icn-hello"]).toBe("1.0-3");
  });

  it("adds a package new to the definition with the part of its dependencies the pinned set lacks, and installs it", async () => {
    const indexes = await readIndexes(sources.archives, sources);
    const both = await pinsToAdd(indexes, "icn-hello", {});
    expect(Object.keys(both).sort()).toEqual(["icn-hello", "icn-lib"]);
    const libOnlyPinned = { "icn-lib": pins["icn-lib"]! };
    const added = await pinsToAdd(indexes, "icn-hello", libOnlyPinned);
    expect(Object.keys(added)).toEqual(["icn-hello"]);
    await ensureDebs(added, sources, { store });
    const { installed } = await install({ pinned: { ...libOnlyPinned, ...added } });
    expect(installed["icn-hello"]).toBe(added["icn-hello"]!.version);
    await expect(pinsToAdd(indexes, "icn-nowhere", pins)).rejects.toThrow(/no suite of the lock's archives lists icn-nowhere/);
  });

  it("a shorter package list keeps only the pins apt still installs from the pinned files (lock --update of a dropped package)", async () => {
    await copyFile(join(work, "hello-1.0-1.deb"), join(mirror.root, mirror.poolPath(HELLO_1))); // the pinned file back in the pool
    await ensureDebs(pins, sources, { store });
    const toy = { suite: sources.suite, packages: pins };
    const libOnly = await installedFromPins(toy, ["icn-lib"], { variant: "custom", mode: "chrootless" });
    expect([...libOnly].filter((n) => n in pins)).toEqual(["icn-lib"]);
    const both = await installedFromPins(toy, ["icn-hello"], { variant: "custom", mode: "chrootless" });
    expect([...both].filter((n) => n in pins).sort()).toEqual(["icn-hello", "icn-lib"]);
  });

  it("takes a security update that left the security pool from the main pool, where a point release copies it", async () => {
    const securityPin = (await newestPin(await readIndexes(sources.archives, sources), "icn-hello"))!;
    const securityFile = join(security.root, securityPin.filename);
    const mainCopy = join(mirror.root, "pool/main/i/icn-hello/icn-hello_1.0-3_all.deb");
    await copyFile(securityFile, mainCopy);
    await rm(securityFile);
    await clearCache();
    const [origin] = await ensureDebs({ "icn-hello": securityPin }, sources, { store });
    expect(origin).toMatchObject({ from: "pool", url: `${mirror.url}/pool/main/i/icn-hello/icn-hello_1.0-3_all.deb`, sha256: securityPin.sha256 });
  });

  it("lists two versions of one package in the same order whether it fetched them or found them cached (the build report)", async () => {
    const securityPin = (await newestPin(await readIndexes(sources.archives, sources), "icn-hello"))!;
    const both: [string, PinnedPackage][] = [
      ["icn-hello", securityPin],
      ["icn-hello", pins["icn-hello"]!],
    ];
    await copyFile(join(work, "hello-1.0-1.deb"), join(mirror.root, mirror.poolPath(HELLO_1))); // the pinned file back in the pool
    await clearCache();
    const fetched = await ensureDebs(both, sources, { store });
    const cached = await ensureDebs(both, sources, { store });
    expect(fetched.map((o) => o.from)).not.toContain("cache");
    expect(cached.map((o) => o.from)).toEqual(["cache", "cache"]);
    const versions = (origins: { version: string }[]) => origins.map((o) => o.version);
    expect(versions(fetched)).toEqual(["1.0-1", "1.0-3"]);
    expect(versions(cached)).toEqual(versions(fetched));
  });

  it("builds a second time from the cache alone, with the archives stopped", async () => {
    await copyFile(join(work, "hello-1.0-1.deb"), join(mirror.root, mirror.poolPath(HELLO_1))); // the pinned file back, to fill the cache once
    await clearCache();
    await ensureDebs(pins, sources, { store });
    await Promise.all([mirror.stop(), security.stop(), snapshot.stop()]);
    const origins = await ensureDebs(pins, sources, { store });
    expect(origins.map((o) => [o.name, o.from])).toEqual([
      ["icn-hello", "cache"],
      ["icn-lib", "cache"],
    ]);
    expect(origins[0]!.url).toBe(`${mirror.url}/pool/main/i/icn-hello/icn-hello_1.0-1_all.deb`);
    const { installed } = await install({ pinned: pins });
    expect(installed).toEqual({ "icn-hello": "1.0-1", "icn-lib": "1.0-1" });
  });

  it("refuses a version-1 lock with the one command that converts it", async () => {
    const old = join(work, "old.lock.yaml");
    await writeFile(
      old,
      yaml.dump({
        version: 1,
        debian: { mirror: "http://deb.debian.org/debian", suite: "trixie", components: ["main"], requested: [], packages: { bash: "5.2.37-2+b10" } },
        artifacts: {},
      }),
    );
    const error = await loadLock(old).catch((e) => e);
    expect(error).toBeInstanceOf(UserError);
    expect(error.message).toMatch(/old lock format \(version 1/);
    expect(error.hint).toMatch(/^run 'icn-bootstrap lock' once to convert it/);
  });
});

const TOY_DEFINITION = `name: toy
debian:
  suite: toy
  packages: [icn-hello]
kubernetes:
  enabled: false
`;
