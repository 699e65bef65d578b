import { mkdir, mkdtemp, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import { cacheRoot, ContentStore, normalizeDigest, sha256Text, tempSibling } from "../cache.js";
import { offlineBuildRecipe } from "../kubespray/components.js";
import { addonsBuildRecipe } from "../addons/components.js";
import { metal3BuildRecipe } from "../metal3/components.js";
import { UserError } from "../errors.js";
import { formatBytes, formatSeconds } from "../log.js";
import { cgoEnv, cgoToolchain, type CgoToolchain } from "./cgo.js";
import { checkGoVersion, goDirective, goToolchain, requiredVersion, runGo, type GoToolchain } from "./go.js";
import type { GoModArtifact } from "./schema.js";

/** What ensuring one artifact produced. */
export interface ArtifactResult {
  name: string;
  source: "gomod" | "url" | "gosrc";
  version: string;
  /** Verified path inside the content store. */
  path: string;
  sha256: string;
  size: number;
  status: "cached" | "built" | "downloaded";
  /** Wall time of the build or download (0 for a cache hit). */
  seconds: number;
  /** Set when a corrupted or missing cache entry was replaced. */
  repaired?: string;
}

export interface SourceContext {
  /** Directory the lock file's relative paths (gomod `dir`) are resolved against. */
  baseDir: string;
  store: ContentStore;
  /** Progress lines (stderr). */
  log(scope: string, message: string): void;
  /** Extra environment for go commands (tests use a file:// GOPROXY). */
  goEnv?: Record<string, string | undefined>;
  /** How often a running build reports that it is still running. */
  heartbeatMs?: number;
  /** The lock file (for the pinned C toolchain of cgo builds). */
  lockPath?: string;
}

/** Where the gomod index lives: cache key -> sha256 of the built binary. */
export function gomodIndexDir(): string {
  return join(cacheRoot(), "gomod");
}

/**
 * Build flags per module. Kubernetes is built the way its release tooling does
 * (hack/lib/golang.sh): static, -trimpath, tags selinux,notest,grpcnotrace, and the
 * version variables set so that `kubectl version --client` / `kubeadm version`
 * report the pinned version ("archive" tree state: built from a source archive).
 */
export function buildRecipe(entry: Pick<GoModArtifact, "module" | "version">): { tags: string[]; ldflags: string[]; cgo?: boolean } {
  const ldflags = ["-s", "-w"];
  if (entry.module === "k8s.io/kubernetes") {
    const [major, minor] = entry.version.replace(/^v/, "").split(".");
    const vars = { gitVersion: entry.version, gitMajor: major!, gitMinor: minor!, gitTreeState: "archive" };
    for (const pkg of ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"]) {
      for (const [key, value] of Object.entries(vars)) ldflags.push(`-X ${pkg}.${key}=${value}`);
    }
    return { tags: ["selinux", "notest", "grpcnotrace"], ldflags };
  }
  const offline =
    offlineBuildRecipe(entry.module, entry.version) ?? metal3BuildRecipe(entry.module, entry.version) ?? addonsBuildRecipe(entry.module, entry.version);
  if (offline) return { tags: offline.tags, ldflags: [...ldflags, ...offline.ldflags], ...(offline.cgo ? { cgo: true } : {}) };
  return { tags: [], ldflags };
}

export interface IndexRecord {
  name: string;
  sha256: string;
  size: number;
  seconds: number;
  builtAt: string;
  inputs: unknown;
}

let toolchainPromise: Promise<GoToolchain> | undefined;
export function toolchainOnce(env?: Record<string, string | undefined>): Promise<GoToolchain> {
  if (env) return goToolchain({ env });
  toolchainPromise ??= goToolchain().catch((error) => {
    toolchainPromise = undefined;
    throw error;
  });
  return toolchainPromise;
}

/** Reads and cross-checks the committed wrapper module of an entry. */
export async function readWrapper(name: string, entry: GoModArtifact, baseDir: string): Promise<{ dir: string; goMod: string; goSum: string }> {
  const dir = resolve(baseDir, entry.dir);
  const rel = relative(process.cwd(), dir);
  const shown = rel && !rel.startsWith("..") ? rel : dir;
  let goMod: string;
  let goSum: string;
  try {
    goMod = await readFile(join(dir, "go.mod"), "utf8");
    goSum = await readFile(join(dir, "go.sum"), "utf8");
  } catch {
    throw new UserError(
      `${name}: the wrapper module ${shown}/go.mod or go.sum is missing`,
      "run 'icn-bootstrap lock-artifacts' to generate it from the pinned version, and commit it",
    );
  }
  const pinned = requiredVersion(goMod, entry.module);
  if (pinned !== entry.version) {
    throw new UserError(
      `${name}: the lock file pins ${entry.module} ${entry.version}, but ${shown}/go.mod requires ${pinned ?? "no version of it"}`,
      "run 'icn-bootstrap lock-artifacts' so the wrapper module follows the lock file",
    );
  }
  const actual = sha256Text(goSum);
  if (actual !== normalizeDigest(entry.goSum)) {
    throw new UserError(
      `${name}: ${shown}/go.sum does not match the lock file (expected sha256 ${normalizeDigest(entry.goSum)}, found ${actual})`,
      "restore the committed go.sum (git checkout), or run 'icn-bootstrap lock-artifacts' to regenerate both",
    );
  }
  return { dir, goMod, goSum };
}

/** The cache key of one binary: everything its bytes depend on. */
export function gomodKey(
  entry: GoModArtifact,
  pkg: string,
  toolchain: GoToolchain,
  goMod: string,
  goSum: string,
  cgoToolchainKey?: string,
): { key: string; inputs: Record<string, unknown> } {
  const recipe = buildRecipe(entry);
  const inputs = {
    kind: "gomod/v1",
    module: entry.module,
    version: entry.version,
    package: pkg,
    go: toolchain.version,
    goos: toolchain.goos,
    goarch: toolchain.goarch,
    cgo: cgoToolchainKey ? `pinned-toolchain:${cgoToolchainKey}` : "0",
    flags: ["-trimpath", "-mod=readonly"],
    tags: recipe.tags,
    ldflags: recipe.ldflags,
    goMod: sha256Text(goMod),
    goSum: sha256Text(goSum),
  };
  return { key: sha256Text(JSON.stringify(inputs)), inputs };
}

/**
 * Returns the binary for `name` from the cache, or builds it from the pinned module
 * (verified against the committed go.sum with -mod=readonly) and stores it.
 * A corrupted or vanished cache entry is rebuilt, and the result says so.
 */
export async function ensureGoModBinary(name: string, entry: GoModArtifact, pkg: string, ctx: SourceContext): Promise<ArtifactResult> {
  const wrapper = await readWrapper(name, entry, ctx.baseDir);
  const toolchain = await toolchainOnce(ctx.goEnv);
  const recipe = buildRecipe(entry);
  let cgo: CgoToolchain | undefined;
  if (recipe.cgo) {
    if (!ctx.lockPath)
      throw new UserError(`${name}: needs cgo, and no lock file names the pinned C toolchain`, "build it through 'icn-bootstrap fetch' or a build");
    cgo = await cgoToolchain(ctx.lockPath);
  }
  const { key, inputs } = gomodKey(entry, pkg, toolchain, wrapper.goMod, wrapper.goSum, cgo?.key);
  const indexPath = join(gomodIndexDir(), key.slice(0, 2), `${key}.json`);

  let repaired: string | undefined;
  const record = await readIndex(indexPath);
  if (record) {
    try {
      const path = await ctx.store.get(record.sha256, name);
      if (path) return { name, source: "gomod", version: entry.version, path, sha256: record.sha256, size: record.size, status: "cached", seconds: 0 };
      repaired = `cache entry ${record.sha256.slice(0, 12)} was missing`;
    } catch (error) {
      if (!(error instanceof UserError)) throw error;
      repaired = error.message;
    }
    ctx.log(name, `${repaired}; rebuilding`);
  }

  checkGoVersion(toolchain, goDirective(wrapper.goMod), name, join(entry.dir, "go.mod"));
  const tmpRoot = join(cacheRoot(), "tmp");
  await mkdir(tmpRoot, { recursive: true });
  const work = await mkdtemp(join(tmpRoot, `build-${name}-`));
  const started = Date.now();
  ctx.log(
    name,
    `building ${pkg}@${entry.version} with ${toolchain.version} (${entry.dir}, -mod=readonly${cgo ? ", cgo with the pinned Debian toolchain" : ""})`,
  );
  const heartbeat = setInterval(() => ctx.log(name, `still building… ${formatSeconds(Date.now() - started)}`), ctx.heartbeatMs ?? 30_000);
  try {
    const out = join(work, name);
    const args = ["build", "-mod=readonly", "-trimpath", `-ldflags=${recipe.ldflags.join(" ")}`, "-o", out];
    if (recipe.tags.length) args.splice(3, 0, `-tags=${recipe.tags.join(",")}`);
    const env = cgo ? { ...ctx.goEnv, ...(await cgoEnv(cgo, work, ctx.goEnv)) } : ctx.goEnv;
    await runGo([...args, pkg], { cwd: wrapper.dir, env, what: name });
    const seconds = (Date.now() - started) / 1000;
    const size = (await stat(out)).size;
    const sha256 = await ctx.store.put(out, { move: true, what: name });
    await writeIndex(indexPath, { name, sha256, size, seconds, builtAt: new Date().toISOString(), inputs });
    const path = ctx.store.pathOf(sha256);
    ctx.log(name, `built in ${formatSeconds(seconds * 1000)}, ${formatBytes(size)}, sha256 ${sha256.slice(0, 12)}`);
    return { name, source: "gomod", version: entry.version, path, sha256, size, status: "built", seconds, ...(repaired ? { repaired } : {}) };
  } finally {
    clearInterval(heartbeat);
    await rm(work, { recursive: true, force: true });
  }
}

export async function readIndex(path: string): Promise<IndexRecord | undefined> {
  try {
    const record = JSON.parse(await readFile(path, "utf8")) as IndexRecord;
    normalizeDigest(record.sha256);
    return record;
  } catch {
    return undefined;
  }
}

export async function writeIndex(path: string, record: IndexRecord): Promise<void> {
  await mkdir(resolve(path, ".."), { recursive: true });
  const temp = tempSibling(path);
  await writeFile(temp, JSON.stringify(record, null, 2));
  await rename(temp, path);
}
