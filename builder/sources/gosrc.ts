/**
 * `gosrc` artifacts: Go programs built from a pinned source archive (schema.ts,
 * GoSrcArtifact), for modules the Go module proxy refuses. The archive is fetched and
 * verified as a url artifact (the upstream mirror applies), extracted, and built with
 * the archive's own go.mod: -mod=vendor from its vendor/ tree, or -mod=mod with its
 * dependencies from the proxy checked against its go.sum. Cached by everything the
 * bytes depend on, like gomod builds.
 */
import { mkdir, mkdtemp, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { cacheRoot, sha256Text } from "../cache.js";
import { UserError } from "../errors.js";
import { formatBytes, formatSeconds } from "../log.js";
import { runGo } from "./go.js";
import { gomodIndexDir, readIndex, toolchainOnce, writeIndex, type ArtifactResult, type SourceContext } from "./gomod.js";
import type { GoSrcArtifact } from "./schema.js";
import { ensureUrlFile, type DownloadOptions } from "./url.js";

export async function ensureGoSrcBinary(
  name: string,
  entryName: string,
  entry: GoSrcArtifact,
  pkg: string,
  ctx: SourceContext,
  opts: DownloadOptions = {},
): Promise<ArtifactResult> {
  const toolchain = await toolchainOnce(ctx.goEnv);
  const ldflags = ["-s", "-w", ...entry.ldflags];
  const inputs = {
    kind: "gosrc/v1",
    archive: entry.sha256.replace(/^sha256:/, ""),
    package: pkg,
    mod: entry.mod,
    go: toolchain.version,
    goos: toolchain.goos,
    goarch: toolchain.goarch,
    cgo: "0",
    flags: ["-trimpath"],
    ldflags,
  };
  const key = sha256Text(JSON.stringify(inputs));
  const indexPath = join(gomodIndexDir(), key.slice(0, 2), `${key}.json`);
  const record = await readIndex(indexPath);
  if (record) {
    const path = await ctx.store.get(record.sha256, name).catch(() => undefined);
    if (path) return { name, source: "gosrc", version: entry.version, path, sha256: record.sha256, size: record.size, status: "cached", seconds: 0 };
    ctx.log(name, "cache entry was missing; rebuilding");
  }

  const archive = await ensureUrlFile(
    entryName,
    { source: "url", url: entry.url, sha256: entry.sha256, version: entry.version, executable: false, profile: entry.profile },
    ctx,
    opts,
  );
  const tmpRoot = join(cacheRoot(), "tmp");
  await mkdir(tmpRoot, { recursive: true });
  const work = await mkdtemp(join(tmpRoot, `gosrc-${name}-`));
  const started = Date.now();
  const heartbeat = setInterval(() => ctx.log(name, `still building… ${formatSeconds(Date.now() - started)}`), ctx.heartbeatMs ?? 30_000);
  try {
    const tree = join(work, "src");
    await mkdir(tree);
    const extracted = await execa("tar", ["-xzf", archive.path, "-C", tree, "--strip-components=1", "--no-same-owner"], { reject: false, all: true });
    if (extracted.failed)
      throw new UserError(
        `${name}: cannot extract ${entry.url}: ${String(extracted.all).trim().split("\n").pop()}`,
        "the lock file's entry must be a .tar.gz source archive with one top directory",
      );
    ctx.log(name, `building ${pkg} of ${entry.url.split("/").pop()} (${entry.version}) with ${toolchain.version} (-mod=${entry.mod})`);
    const out = join(work, name);
    await runGo(["build", `-mod=${entry.mod}`, "-trimpath", `-ldflags=${ldflags.join(" ")}`, "-o", out, pkg], {
      cwd: tree,
      env: { ...ctx.goEnv, GOFLAGS: `-mod=${entry.mod}` },
      what: name,
    });
    const seconds = (Date.now() - started) / 1000;
    const size = (await stat(out)).size;
    const sha256 = await ctx.store.put(out, { move: true, what: name });
    await writeIndex(indexPath, { name, sha256, size, seconds, builtAt: new Date().toISOString(), inputs });
    ctx.log(name, `built in ${formatSeconds(seconds * 1000)}, ${formatBytes(size)}, sha256 ${sha256.slice(0, 12)}`);
    return { name, source: "gosrc", version: entry.version, path: ctx.store.pathOf(sha256), sha256, size, status: "built", seconds };
  } finally {
    clearInterval(heartbeat);
    await rm(work, { recursive: true, force: true });
  }
}
