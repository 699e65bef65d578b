import { createWriteStream } from "node:fs";
import { chmod, mkdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { cacheRoot, normalizeDigest } from "../cache.js";
import { sha256File } from "../../common/hash.js";
import { UserError } from "../errors.js";
import { formatBytes, formatSeconds } from "../log.js";
import type { ArtifactResult, SourceContext } from "./gomod.js";
import { activeMirror, mirroredUrl } from "./mirror.js";
import type { UrlArtifact } from "./schema.js";

export interface DownloadOptions {
  /** How many times a broken transfer is resumed (or restarted) before giving up. */
  attempts?: number;
  /** A transfer that receives nothing for this long is treated as broken. */
  idleTimeoutMs?: number;
  /** How often progress is reported for a long download. */
  progressMs?: number;
}

/** Partial downloads, named by their expected digest so a later run can resume them. */
export function downloadsDir(): string {
  return join(cacheRoot(), "downloads");
}

/**
 * Returns the file of a `url` artifact from the cache, or downloads it.
 *
 * The download goes to `downloads/<sha256>.partial`; it becomes visible in the
 * content store only after its digest matched (the store's rename). A broken
 * transfer is resumed with an HTTP Range request, or restarted from zero when the
 * server ignores the range. A digest mismatch deletes the partial file and stores
 * nothing.
 */
export async function ensureUrlFile(name: string, entry: UrlArtifact, ctx: SourceContext, opts: DownloadOptions = {}): Promise<ArtifactResult> {
  if (entry.sha256 === "unknown") {
    throw new UserError(
      `${name}: the lock file has no sha256 for ${entry.url} (marked 'unknown': it could not be downloaded where the lock was written)`,
      `download it, check it, and write its digest into appliance.lock.yaml (artifacts.${name}.sha256: the output of 'sha256sum FILE'); or point url at a copy you trust`,
    );
  }
  const expected = normalizeDigest(entry.sha256);
  const version = entry.version ?? "-";
  let repaired: string | undefined;
  try {
    const path = await ctx.store.get(expected, name);
    if (path) {
      const size = (await stat(path)).size;
      return { name, source: "url", version, path, sha256: expected, size, status: "cached", seconds: 0 };
    }
  } catch (error) {
    if (!(error instanceof UserError)) throw error;
    repaired = error.message;
    ctx.log(name, `${repaired}; downloading again`);
  }

  await mkdir(downloadsDir(), { recursive: true });
  const partial = join(downloadsDir(), `${expected}.partial`);
  const started = Date.now();
  await downloadFromMirrorOrUpstream(name, entry.url, partial, ctx, opts);
  const actual = await sha256File(partial);
  if (actual !== expected) {
    await rm(partial, { force: true });
    throw new UserError(
      `${name}: sha256 mismatch for ${entry.url}: expected ${expected}, got ${actual}`,
      "nothing was cached. If the lock file's digest is right, the server sent a different file (check the URL and any proxy); if the file legitimately changed, verify it and update sha256 in appliance.lock.yaml",
    );
  }
  if (entry.executable) await chmod(partial, 0o755);
  const size = (await stat(partial)).size;
  await ctx.store.put(partial, { expected, move: true, what: name });
  const seconds = (Date.now() - started) / 1000;
  ctx.log(name, `downloaded ${formatBytes(size)} in ${formatSeconds(seconds * 1000)}, sha256 verified`);
  return {
    name,
    source: "url",
    version,
    path: ctx.store.pathOf(expected),
    sha256: expected,
    size,
    status: "downloaded",
    seconds,
    ...(repaired ? { repaired } : {}),
  };
}

class BrokenTransfer extends Error {}
class NotFound extends UserError {}

/** The mirror's copy first (when a mirror is set up and has it), else the URL itself. */
async function downloadFromMirrorOrUpstream(name: string, url: string, partial: string, ctx: SourceContext, opts: DownloadOptions): Promise<void> {
  // Only upstream (https) downloads have a place in a mirror laid out by host.
  const mirror = url.startsWith("https://") ? await activeMirror() : undefined;
  if (mirror) {
    const copy = mirroredUrl(url, mirror.base);
    try {
      ctx.log(name, `fetching ${url} from the mirror ${mirror.describe}`);
      await download(name, copy, partial, ctx, opts);
      return;
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      ctx.log(name, `not in the mirror; fetching ${url}`);
    }
  }
  try {
    await download(name, url, partial, ctx, opts);
  } catch (error) {
    if (mirror && error instanceof UserError && !(error instanceof NotFound)) {
      throw new UserError(`${error.message} (and the mirror ${mirror.describe} has no copy at ${mirroredUrl(url, mirror.base)})`, error.hint);
    }
    throw error;
  }
}

async function download(name: string, url: string, partial: string, ctx: SourceContext, opts: DownloadOptions): Promise<void> {
  const attempts = opts.attempts ?? 5;
  for (let attempt = 1; ; attempt++) {
    try {
      await transfer(name, url, partial, ctx, opts);
      return;
    } catch (error) {
      if (!(error instanceof BrokenTransfer)) throw error;
      if (attempt >= attempts) {
        throw new UserError(
          `${name}: download of ${url} kept breaking off (${attempts} attempts, last: ${error.message})`,
          "check the network or the server and run the command again: the partial download is kept and resumed",
        );
      }
      ctx.log(name, `${error.message}; resuming (attempt ${attempt + 1} of ${attempts})`);
    }
  }
}

async function transfer(name: string, url: string, partial: string, ctx: SourceContext, opts: DownloadOptions): Promise<void> {
  const have = await stat(partial).then(
    (s) => s.size,
    () => 0,
  );
  const idle = new AbortController();
  let idleTimer: NodeJS.Timeout | undefined;
  const armIdle = () => {
    clearTimeout(idleTimer);
    idleTimer = setTimeout(() => idle.abort(new BrokenTransfer("no data received for a while")), opts.idleTimeoutMs ?? 60_000);
  };
  armIdle();
  let response: Response;
  try {
    response = await fetch(url, { headers: have > 0 ? { range: `bytes=${have}-` } : {}, redirect: "follow", signal: idle.signal });
  } catch (error) {
    clearTimeout(idleTimer);
    if (idle.signal.aborted) throw new BrokenTransfer("no response from the server");
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const reason = cause?.code ?? cause?.message ?? (error as Error).message;
    if (cause?.code === "ECONNRESET" || cause?.code === "UND_ERR_SOCKET") throw new BrokenTransfer(`connection lost (${reason})`);
    throw new UserError(
      `${name}: cannot download ${url}: ${reason}`,
      'check the URL in appliance.lock.yaml and that the host is reachable; where it is not, set ICN_BOOTSTRAP_MIRROR to a directory (or base URL) laid out by upstream URL that has the file (README, "Application clusters")',
    );
  }

  let offset = 0;
  if (response.status === 206 && have > 0) {
    const range = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(response.headers.get("content-range") ?? "");
    if (range && Number(range[1]) === have) offset = have;
    else {
      ctx.log(name, "server answered the resume request with an unexpected range; restarting from zero");
      await response.body?.cancel();
      await rm(partial, { force: true });
      clearTimeout(idleTimer);
      throw new BrokenTransfer("unusable range response");
    }
  } else if (response.status === 416 && have > 0) {
    // Our partial is as long as (or longer than) the file: let the digest decide, from zero.
    await response.body?.cancel();
    await rm(partial, { force: true });
    clearTimeout(idleTimer);
    throw new BrokenTransfer("range not satisfiable");
  } else if (response.status !== 200) {
    clearTimeout(idleTimer);
    await response.body?.cancel();
    if (response.status >= 500 || response.status === 429) throw new BrokenTransfer(`HTTP ${response.status}`);
    if (response.status === 404)
      throw new NotFound(`${name}: download of ${url} failed: HTTP 404 ${response.statusText}`, "check the URL in appliance.lock.yaml");
    throw new UserError(`${name}: download of ${url} failed: HTTP ${response.status} ${response.statusText}`, "check the URL in appliance.lock.yaml");
  } else if (have > 0) {
    ctx.log(name, "server does not support resuming (no Range); restarting from zero");
  }

  const length = Number(response.headers.get("content-length") ?? NaN);
  const total = Number.isFinite(length) ? offset + length : undefined;
  let received = offset;
  let lastReport = Date.now();
  const started = Date.now();
  if (offset > 0) ctx.log(name, `resuming at ${formatBytes(offset)}${total ? ` of ${formatBytes(total)}` : ""}`);
  const progress = new Transform({
    transform(chunk: Buffer, _enc, done) {
      armIdle();
      received += chunk.length;
      if (Date.now() - lastReport >= (opts.progressMs ?? 5_000)) {
        lastReport = Date.now();
        const pct = total ? ` (${Math.floor((received / total) * 100)}%)` : "";
        ctx.log(name, `${formatBytes(received)}${total ? ` / ${formatBytes(total)}` : ""}${pct}, ${formatSeconds(Date.now() - started)}`);
      }
      done(null, chunk);
    },
  });
  try {
    if (!response.body) throw new BrokenTransfer("empty response");
    await pipeline(
      Readable.fromWeb(response.body as import("node:stream/web").ReadableStream),
      progress,
      createWriteStream(partial, { flags: offset > 0 ? "a" : "w" }),
    );
  } catch (error) {
    if (error instanceof UserError) throw error;
    throw new BrokenTransfer(`connection lost after ${formatBytes(received)}${total ? ` of ${formatBytes(total)}` : ""} (${(error as Error).message})`);
  } finally {
    clearTimeout(idleTimer);
  }
  if (total !== undefined && received < total) throw new BrokenTransfer(`connection closed after ${formatBytes(received)} of ${formatBytes(total)}`);
}
