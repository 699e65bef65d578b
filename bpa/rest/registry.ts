/**
 * A small client of the OCI distribution API, enough to push an image: blobs by
 * monolithic upload (streamed from disk), manifests by digest and by tag. It talks to the
 * appliance's registry through nginx (TLS with the site CA; pushes need HTTP Basic
 * credentials), the same path every other writer uses.
 */
import { createReadStream } from "node:fs";
import { request } from "node:https";
import { request as plainRequest, type IncomingMessage } from "node:http";
import { URL } from "node:url";

export interface RegistryAccess {
  /** https://host:port of the registry. */
  url: string;
  /** PEM of the CA that signed the registry's certificate. */
  ca?: string;
  username: string;
  password: string;
}

export class RegistryError extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = "RegistryError";
  }
}

interface Reply {
  status: number;
  headers: IncomingMessage["headers"];
  body: string;
}

export class RegistryClient {
  private readonly base: URL;
  private readonly authorization: string;

  constructor(private readonly access: RegistryAccess) {
    this.base = new URL(access.url);
    this.authorization = `Basic ${Buffer.from(`${access.username}:${access.password}`).toString("base64")}`;
  }

  /** host:port as image references name it. */
  get host(): string {
    return this.base.host;
  }

  private send(method: string, path: string, headers: Record<string, string | number>, body?: Buffer | { file: string }, timeoutMs?: number): Promise<Reply> {
    const url = new URL(path, this.base);
    const send = url.protocol === "https:" ? request : plainRequest;
    return new Promise((resolve, reject) => {
      const req = send(
        url,
        { method, headers: { authorization: this.authorization, ...headers }, ...(this.access.ca ? { ca: this.access.ca } : {}) },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.length < 64 && chunks.push(c));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
          res.on("error", reject);
        },
      );
      req.on("error", (error) => reject(new RegistryError(`registry ${this.base.host}: ${error.message}`)));
      if (timeoutMs) req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer to ${method} ${url.pathname} in ${timeoutMs / 1000} s`)));
      if (Buffer.isBuffer(body)) req.end(body);
      else if (body) {
        const stream = createReadStream(body.file, { highWaterMark: 1 << 20 });
        stream.on("error", (error) => req.destroy(error));
        stream.pipe(req);
      } else req.end();
    });
  }

  private fail(what: string, reply: Reply): never {
    let detail = reply.body.trim().slice(0, 500);
    try {
      const parsed = JSON.parse(reply.body) as { errors?: { code?: string; message?: string }[] };
      if (parsed.errors?.length) detail = parsed.errors.map((e) => `${e.code ?? ""}: ${e.message ?? ""}`).join("; ");
    } catch {
      // nginx answers in plain text (401, 403 for a shipped tag)
    }
    throw new RegistryError(`registry ${this.base.host} refused ${what} (HTTP ${reply.status}): ${detail}`, reply.status);
  }

  /** The repository's tags (none when it does not exist); a registry that does not answer within `timeoutMs` is an error. */
  async tags(repository: string, timeoutMs = 10_000): Promise<string[]> {
    const reply = await this.send("GET", `/v2/${repository}/tags/list`, {}, undefined, timeoutMs);
    if (reply.status === 404) return [];
    if (reply.status !== 200) this.fail(`the tags of ${repository}`, reply);
    try {
      const tags = (JSON.parse(reply.body) as { tags?: unknown }).tags;
      return Array.isArray(tags) ? tags.filter((t): t is string => typeof t === "string") : [];
    } catch {
      throw new RegistryError(`registry ${this.base.host} answered the tags of ${repository} with no JSON`);
    }
  }

  async hasBlob(repository: string, digest: string): Promise<boolean> {
    const reply = await this.send("HEAD", `/v2/${repository}/blobs/${digest}`, {});
    return reply.status === 200;
  }

  /** Uploads a blob from a file unless the repository has it already. */
  async pushBlob(repository: string, digest: string, size: number, file: string): Promise<"pushed" | "present"> {
    if (await this.hasBlob(repository, digest)) return "present";
    const start = await this.send("POST", `/v2/${repository}/blobs/uploads/`, { "content-length": 0 });
    if (start.status !== 202 || !start.headers.location) this.fail(`the upload of blob ${digest} to ${repository}`, start);
    const location = new URL(start.headers.location, this.base);
    location.searchParams.set("digest", digest);
    const put = await this.send("PUT", location.pathname + location.search, { "content-type": "application/octet-stream", "content-length": size }, { file });
    if (put.status !== 201) this.fail(`blob ${digest} for ${repository}`, put);
    return "pushed";
  }

  /** PUTs a manifest under a tag or digest; returns the digest the registry computed. */
  async pushManifest(repository: string, reference: string, mediaType: string, bytes: Buffer): Promise<string> {
    const reply = await this.send("PUT", `/v2/${repository}/manifests/${reference}`, { "content-type": mediaType, "content-length": bytes.length }, bytes);
    if (reply.status !== 201) this.fail(`manifest ${repository}:${reference}`, reply);
    const digest = reply.headers["docker-content-digest"];
    return typeof digest === "string" ? digest : "";
  }
}
