/**
 * The upstream mirror of `url` artifacts: a place laid out by upstream URL
 * (`<mirror>/<host>/<path>` is `https://<host>/<path>`), tried before the real URL.
 * Where GitHub is unreachable (this build environment) it is the only way in; the
 * sha256 of the lock file decides either way, so a mirror can never change a build.
 *
 * `ICN_BOOTSTRAP_MIRROR` names it: an http(s) base URL, or a directory, which is then
 * served on 127.0.0.1 for the life of the process (so the same download, resume and
 * verification code runs as for a real server). When it is unset, the directory
 * `../shared/mirror` beside the repository is used if it exists.
 */
import { createReadStream, existsSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join, normalize, resolve, sep } from "node:path";
import { UserError } from "../errors.js";

export const MIRROR_ENV = "ICN_BOOTSTRAP_MIRROR";
const DEFAULT_MIRROR_DIR = resolve(import.meta.dirname, "..", "..", "..", "shared", "mirror");

export interface Mirror {
  /** The base URL a mirrored file is fetched from (`<base>/<host>/<path>`). */
  base: string;
  /** What to tell the user: the directory or URL, and where that setting came from. */
  describe: string;
}

const served = new Map<string, Promise<{ server: Server; base: string }>>();

/** The mirror to try first, or undefined. Starts the loopback server for a directory mirror on first use. */
export async function activeMirror(env: NodeJS.ProcessEnv = process.env): Promise<Mirror | undefined> {
  const setting = env[MIRROR_ENV]?.trim();
  if (setting === "none" || setting === "off") return undefined;
  if (setting && /^https?:\/\//.test(setting)) return { base: setting.replace(/\/+$/, ""), describe: `${setting} (${MIRROR_ENV})` };
  const dir = setting ? resolve(setting) : existsSync(DEFAULT_MIRROR_DIR) ? DEFAULT_MIRROR_DIR : undefined;
  if (!dir) return undefined;
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new UserError(
      `${MIRROR_ENV}=${setting}: no such directory`,
      "point it at a directory laid out by upstream URL (<dir>/github.com/...), at an http(s) base URL, or unset it",
    );
  }
  const { base } = await serveDirectory(dir);
  return { base, describe: `${dir} (${setting ? MIRROR_ENV : "the default mirror directory"}, served on ${base})` };
}

/** Where a URL is found in a mirror: `https://host/path` -> `<base>/host/path`. */
export function mirroredUrl(url: string, base: string): string {
  const u = new URL(url);
  return `${base}/${u.host}${u.pathname}`;
}

/** Serves a directory read-only on 127.0.0.1 (GET/HEAD, single byte ranges), once per process. */
export function serveDirectory(dir: string): Promise<{ server: Server; base: string }> {
  const root = resolve(dir);
  const running = served.get(root);
  if (running) return running;
  const starting = new Promise<{ server: Server; base: string }>((resolveServer, reject) => {
    const server = createServer((req, res) => {
      if (req.method !== "GET" && req.method !== "HEAD") return void res.writeHead(405).end();
      const path = normalize(join(root, decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname)));
      let size: number;
      try {
        if (!path.startsWith(root + sep)) throw new Error("outside");
        const s = statSync(path);
        if (!s.isFile()) throw new Error("not a file");
        size = s.size;
      } catch {
        return void res.writeHead(404).end("not found\n");
      }
      const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "");
      if (range) {
        const start = Number(range[1]);
        const end = range[2] ? Math.min(Number(range[2]), size - 1) : size - 1;
        if (start >= size || start > end) return void res.writeHead(416, { "content-range": `bytes */${size}` }).end();
        res.writeHead(206, { "content-length": end - start + 1, "content-range": `bytes ${start}-${end}/${size}`, "accept-ranges": "bytes" });
        if (req.method === "HEAD") return void res.end();
        return void createReadStream(path, { start, end }).pipe(res);
      }
      res.writeHead(200, { "content-length": size, "accept-ranges": "bytes" });
      if (req.method === "HEAD") return void res.end();
      createReadStream(path).pipe(res);
    });
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.unref();
      resolveServer({ server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
    });
  });
  served.set(root, starting);
  return starting;
}
