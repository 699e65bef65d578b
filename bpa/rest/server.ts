/**
 * The BPA's REST API as one HTTP(S) listener: resumable uploads (tus), upload and install
 * status, the OpenAPI document and the status page. Every data route needs a bearer token
 * of the bootstrap cluster and an RBAC permission (auth.ts); the page's HTML and script
 * and the OpenAPI document carry no data and are public.
 */
import { readFileSync, statSync } from "node:fs";
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import type { BuiltOsImage } from "../../common/os-images.js";
import { errorMessage, statusCode, type Clients } from "../runtime/kube.js";
import type { Logger } from "../runtime/log.js";
import {
  LIST_HOSTS,
  LIST_PROVISIONINGS,
  LIST_UPLOADS,
  READ_APPLIANCE_UPGRADE,
  UPGRADE_APPLIANCE,
  UPLOAD,
  type Authenticator,
  type Caller,
  type Permission,
} from "./auth.js";
import { readRequestBody, upgradeRequest, type ApplianceUpgrades } from "./appliance-upgrade.js";
import { listBuiltOsImages } from "./owners.js";
import { RequestError } from "../../common/uploads.js";
import { openApiDocument } from "./openapi.js";
import { PAGE_HTML, PAGE_SCRIPT } from "./page.js";
import { listHosts, listProvisionings } from "./status.js";
import { withUrls } from "./store.js";
import type { Uploads } from "./uploads.js";

export const API = "/api/v1";
export const UPLOADS_PATH = `${API}/uploads`;
export const APPLIANCE_UPGRADE_PATH = `${API}/appliance/upgrade`;
/**
 * An upload's URL exactly as its creation's Location gives it. tus takes the id from the
 * last segment of the whole URL, query included: any other form (`ID?x=/OTHER`, `ID;/OTHER`,
 * `%2F`, `//`, more segments) could name one id to the owner check and another to tus.
 */
const UPLOAD_URL = new RegExp(`^${UPLOADS_PATH}/([A-Za-z0-9_-]+)$`);

/** Every route this server answers (the OpenAPI document must describe each: a test checks it). */
export const ROUTES = [
  { method: "GET", path: "/", auth: "none" },
  { method: "GET", path: "/page.js", auth: "none" },
  { method: "GET", path: "/openapi.json", auth: "none" },
  { method: "GET", path: "/healthz", auth: "none" },
  { method: "GET", path: `${API}/uploads`, auth: "list uploads" },
  { method: "GET", path: `${API}/os-images`, auth: "list uploads" },
  { method: "GET", path: `${API}/provisionings`, auth: "list provisionings" },
  { method: "GET", path: `${API}/hosts`, auth: "list baremetalhosts" },
  { method: "GET", path: `${API}/appliance/upgrade`, auth: "get applianceupgrades" },
  { method: "POST", path: `${API}/appliance/upgrade`, auth: "create applianceupgrades" },
  { method: "DELETE", path: `${API}/appliance/upgrade`, auth: "create applianceupgrades" },
  { method: "OPTIONS", path: `${API}/uploads`, auth: "none" },
  { method: "POST", path: `${API}/uploads`, auth: "create uploads" },
  { method: "HEAD", path: `${API}/uploads/{id}`, auth: "create uploads" },
  { method: "PATCH", path: `${API}/uploads/{id}`, auth: "create uploads" },
  { method: "DELETE", path: `${API}/uploads/{id}`, auth: "create uploads" },
] as const;

export interface ApiServerOptions {
  uploads: Uploads;
  /** Upgrade requests for the host, and the host's mirror of the upgrade's state. */
  upgrades: ApplianceUpgrades;
  /** The file server's base URL for a request's Host header. */
  filesBase: (host: string | undefined) => string;
  auth: Authenticator;
  clients: Clients;
  /** The API's own namespace: where the build's OS images are announced. */
  namespace: string;
  log: Logger;
  /** PEM files, re-read when the certificate file changes (checked every reloadMs). */
  tls?: { certFile: string; keyFile: string; reloadMs?: number };
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = `${JSON.stringify(body, null, 2)}\n`;
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), "cache-control": "no-store" });
  res.end(text);
}

function sendError(res: ServerResponse, status: number, message: string): void {
  const headers: Record<string, string> = {};
  if (status === 401) headers["www-authenticate"] = 'Bearer realm="icn-bootstrap"';
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  sendJson(res, status, { error: message });
}

export class ApiServer {
  readonly server: Server | HttpsServer;
  private tlsTimer: NodeJS.Timeout | undefined;

  constructor(private readonly o: ApiServerOptions) {
    const handler = (req: IncomingMessage, res: ServerResponse) => {
      this.route(req, res).catch((error: unknown) => {
        // The Kubernetes API busy or starting (429, 503): the caller may retry.
        const kubeStatus = statusCode(error);
        const status = error instanceof RequestError ? error.status : kubeStatus === 429 || kubeStatus === 503 ? 503 : 500;
        if (status === 503) res.setHeader("retry-after", "5");
        const message = error instanceof RequestError ? error.message : errorMessage(error);
        if (status === 500) o.log.error("request failed", { method: req.method, url: req.url, error: message });
        if (!res.headersSent) sendError(res, status, status === 500 ? `internal error: ${message}` : message);
        else res.destroy();
      });
    };
    if (o.tls) {
      const { certFile, keyFile } = o.tls;
      const load = () => ({ cert: readFileSync(certFile), key: readFileSync(keyFile) });
      const https = createHttpsServer(load(), handler);
      // The certificate is re-issued when the appliance's addresses change: pick it up.
      let mtime = statSync(certFile).mtimeMs;
      this.tlsTimer = setInterval(() => {
        try {
          const now = statSync(certFile).mtimeMs;
          if (now !== mtime) {
            https.setSecureContext(load());
            mtime = now;
            o.log.info("reloaded the TLS certificate", { certFile });
          }
        } catch (error) {
          o.log.warn("cannot reload the TLS certificate", { error: String(error) });
        }
      }, o.tls.reloadMs ?? 30_000);
      this.tlsTimer.unref();
      this.server = https;
    } else {
      this.server = createHttpServer(handler);
    }
    // Long uploads: no request timeout (tus PATCH bodies may take hours on a slow link).
    this.server.requestTimeout = 0;
  }

  listen(port: number, host?: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(port, host, () => {
        const address = this.server.address();
        resolve(typeof address === "object" && address ? address.port : port);
      });
    });
  }

  async close(): Promise<void> {
    if (this.tlsTimer) clearInterval(this.tlsTimer);
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** The build's OS images, announced by ConfigMaps in the API's namespace (common/os-images.ts); none when they cannot be read. */
  private async builtOsImages(): Promise<BuiltOsImage[]> {
    try {
      return await listBuiltOsImages(this.o.clients, this.o.namespace);
    } catch (error) {
      this.o.log.warn("cannot list the build's OS images", { namespace: this.o.namespace, error: String(error) });
      return [];
    }
  }

  private async check(req: IncomingMessage, permission: Permission): Promise<Caller> {
    const caller = await this.o.auth.authenticate(req.headers.authorization);
    await this.o.auth.authorize(caller, permission);
    return caller;
  }

  /** GET: the pending request and the last upgrade's state; POST {"image": NAME}: ask for an upgrade; DELETE: withdraw a request not taken yet. */
  private async applianceUpgrade(req: IncomingMessage, res: ServerResponse, method: string): Promise<void> {
    const upgrades = this.o.upgrades;
    if (method === "GET") {
      await this.check(req, READ_APPLIANCE_UPGRADE);
      return sendJson(res, 200, { pending: (await upgrades.pending()) ?? null, state: (await upgrades.state()) ?? null });
    }
    if (method === "POST") {
      const caller = await this.check(req, UPGRADE_APPLIANCE);
      const request = upgradeRequest(await readRequestBody(req), await this.o.uploads.list(), caller.username);
      await upgrades.request(request);
      this.o.log.info("appliance upgrade requested", { image: request.image, by: caller.username });
      return sendJson(res, 202, { pending: request, state: (await upgrades.state()) ?? null });
    }
    if (method === "DELETE") {
      await this.check(req, UPGRADE_APPLIANCE);
      if (!(await upgrades.withdraw())) throw new RequestError(404, "no upgrade request is waiting (one the appliance has taken cannot be withdrawn)");
      return sendJson(res, 200, { pending: null, state: (await upgrades.state()) ?? null });
    }
    throw new RequestError(405, `${method} ${APPLIANCE_UPGRADE_PATH} is not supported: GET, POST or DELETE`);
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://localhost");
    const path = url.pathname.replace(/\/+$/, "") || "/";
    const method = req.method ?? "GET";

    if (path === UPLOADS_PATH || path.startsWith(`${UPLOADS_PATH}/`)) {
      if (method === "GET" && path === UPLOADS_PATH) {
        await this.check(req, LIST_UPLOADS);
        const base = this.o.filesBase(req.headers.host);
        return sendJson(res, 200, { items: (await this.o.uploads.list()).map((u) => withUrls(u, base)) });
      }
      if (method === "OPTIONS") return this.o.uploads.handle(req, res);
      if (!["POST", "HEAD", "PATCH", "DELETE"].includes(method)) throw new RequestError(405, `${method} ${path} is not supported: see /openapi.json`);
      const caller = await this.check(req, UPLOAD);
      if (path === UPLOADS_PATH) {
        if (method !== "POST") throw new RequestError(405, `${method} ${path}: only POST creates an upload`);
        return this.o.uploads.handle(req, res, caller);
      }
      const id = UPLOAD_URL.exec(req.url ?? "")?.[1];
      if (!id)
        throw new RequestError(
          404,
          `no such upload: ${req.url}; an upload's URL is ${UPLOADS_PATH}/ID as its creation's Location gave it, with nothing after the id`,
        );
      const owner = await this.o.uploads.owner(id);
      if (owner !== caller.username) throw new RequestError(403, `upload ${id} belongs to ${owner || "another user"}, not to ${caller.username}`);
      return this.o.uploads.handle(req, res, caller, id);
    }
    if (path === APPLIANCE_UPGRADE_PATH) return this.applianceUpgrade(req, res, method);
    if (method !== "GET" && method !== "HEAD") throw new RequestError(405, `${method} ${path} is not supported: see /openapi.json`);
    switch (path) {
      case "/healthz":
        res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
        return;
      case "/":
        res.writeHead(200, {
          "content-type": "text/html; charset=utf-8",
          "content-security-policy": "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:",
          "x-content-type-options": "nosniff",
          "referrer-policy": "no-referrer",
        });
        res.end(PAGE_HTML);
        return;
      case "/page.js":
        res.writeHead(200, { "content-type": "text/javascript; charset=utf-8", "x-content-type-options": "nosniff" }).end(PAGE_SCRIPT);
        return;
      case "/openapi.json":
        return sendJson(res, 200, openApiDocument());
      case `${API}/os-images`: {
        await this.check(req, LIST_UPLOADS);
        const base = this.o.filesBase(req.headers.host);
        // The build's own (the compute nodes' image) are served before an upload of the same name (icn-bootstrap-files.conf).
        const built = await this.builtOsImages();
        const images = (await this.o.uploads.list())
          .filter((u) => u.kind === "os-image" && u.state === "published" && !built.some((b) => b.name === u.name))
          .map((u) => withUrls(u, base));
        // What a BareMetalHost's spec.image takes: url, checksum (the value) and checksumType, format.
        const uploaded = images.map((u) => ({
          name: u.name,
          url: u.url,
          checksum: u.sha256,
          checksumType: "sha256",
          checksumUrl: u.checksumUrl,
          sha256: u.sha256,
          format: u.format,
          size: u.size,
          published: u.finished,
          source: "upload",
        }));
        return sendJson(res, 200, {
          items: [
            ...uploaded,
            ...built.map((b) => ({
              name: b.name,
              url: `${base}${b.path}`,
              checksum: b.sha256,
              checksumType: "sha256",
              checksumUrl: `${base}${b.path}.sha256sum`,
              sha256: b.sha256,
              format: b.format,
              size: b.size,
              source: "build",
            })),
          ],
        });
      }
      case `${API}/provisionings`:
        await this.check(req, LIST_PROVISIONINGS);
        return sendJson(res, 200, { items: await listProvisionings(this.o.clients) });
      case `${API}/hosts`:
        await this.check(req, LIST_HOSTS);
        return sendJson(res, 200, { items: await listHosts(this.o.clients) });
      default:
        throw new RequestError(404, `no such resource: ${path} (see /openapi.json)`);
    }
  }
}
