/**
 * Helpers for the REST API's integration tests: the API started in this process against
 * the real kube-apiserver, as its own ServiceAccount with the RBAC of manifests/bpa/api.yaml
 * (moved to the test's namespace), over TLS with a certificate of a CA made by the test;
 * ServiceAccount tokens (TokenRequest, as `kubectl create token --audience icn-bpa-api`); a small HTTPS client
 * that speaks tus as curl users do.
 */
import { createHash } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig, type V1ClusterRole, type V1ClusterRoleBinding, type V1Role, type V1RoleBinding } from "@kubernetes/client-node";
import { isConflict, type Clients } from "../../bpa/runtime/kube.js";
import { loadApiConfig } from "../../bpa/rest/config.js";
import { startApi, type RunningApi } from "../../bpa/rest/main.js";
import { makeServerTls, type TestTls } from "./fixtures/bpa/server-tls.js";
import { deleteNamespace, loadKubeYaml, newNamespace, testLogger, waitFor } from "./operator-suite.js";

export { makeServerTls, type TestTls };

/** Creates what manifests/bpa/api.yaml grants, with its namespaced parts moved to `ns` and its cluster-wide bindings renamed for it. */
export async function applyApiRbac(c: Clients, ns: string): Promise<void> {
  const docs = await loadKubeYaml<{ kind: string; metadata: { name: string; namespace?: string } }>("manifests/bpa/api.yaml");
  const ignoreConflict = (error: unknown) => {
    if (!isConflict(error)) throw error;
  };
  for (const doc of docs) {
    if (doc.metadata.namespace) doc.metadata.namespace = ns;
    const subjects = (doc as { subjects?: { namespace?: string }[] }).subjects;
    for (const s of subjects ?? []) if (s.namespace) s.namespace = ns;
    switch (doc.kind) {
      case "ServiceAccount":
        await c.core.createNamespacedServiceAccount({ namespace: ns, body: doc }).catch(ignoreConflict);
        break;
      case "ClusterRole":
        await c.rbac.createClusterRole({ body: doc as V1ClusterRole }).catch(ignoreConflict);
        break;
      case "ClusterRoleBinding":
        doc.metadata.name = `${doc.metadata.name}-${ns}`;
        await c.rbac.createClusterRoleBinding({ body: doc as V1ClusterRoleBinding }).catch(ignoreConflict);
        break;
      case "Role":
        await c.rbac.createNamespacedRole({ namespace: ns, body: doc as V1Role });
        break;
      case "RoleBinding":
        await c.rbac.createNamespacedRoleBinding({ namespace: ns, body: doc as V1RoleBinding });
        break;
      default:
        break; // PV, PVC, Deployment, Service: the test runs the API in-process
    }
  }
}

/**
 * What the appliance's first boot creates for the API's pushes: the registry account's
 * Secret (under the name manifests/bpa/api.yaml lets the API read) and the CA's ConfigMap.
 * Returns the environment that points the API at that Secret.
 */
export async function createRegistryAccess(
  c: Clients,
  ns: string,
  access: { username: string; password: string; ca: string },
): Promise<Record<string, string>> {
  const docs = await loadKubeYaml<{ kind: string; rules?: { resources?: string[]; resourceNames?: string[] }[] }>("manifests/bpa/api.yaml");
  const secret = docs.flatMap((d) => (d.kind === "Role" ? (d.rules ?? []) : [])).find((r) => r.resources?.includes("secrets"))?.resourceNames?.[0];
  if (!secret) throw new Error("manifests/bpa/api.yaml grants the API no Secret by name: update test/integration/bpa/rest-helpers.ts");
  await c.core.createNamespacedSecret({
    namespace: ns,
    body: { metadata: { name: secret }, type: "kubernetes.io/basic-auth", stringData: { username: access.username, password: access.password } },
  });
  await c.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: "icn-registry-ca" }, data: { "ca.crt": access.ca } } });
  return { BPA_API_PUSH_SECRET: secret };
}

/**
 * A client with the token of ServiceAccount `name`, bound to the ClusterRole bpa-api-uploader
 * (or `clusterRole`) in `ns` (another uploader); `replaceOthers` also grants it update on
 * uploads, the right to replace what others published, as an administrator would.
 */
export async function uploaderClient(
  c: Clients,
  fixture: { ns: string; url: string; tls: TestTls },
  name: string,
  replaceOthers = false,
  clusterRole = "bpa-api-uploader",
): Promise<ApiClient> {
  const { ns } = fixture;
  const bind = (roleRef: { kind: string; name: string }, binding: string) =>
    c.rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: {
        metadata: { name: binding },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", ...roleRef },
        subjects: [{ kind: "ServiceAccount", name, namespace: ns }],
      },
    });
  await bind({ kind: "ClusterRole", name: clusterRole }, name);
  if (replaceOthers) {
    await c.rbac.createNamespacedRole({
      namespace: ns,
      body: { metadata: { name: `${name}-replace` }, rules: [{ apiGroups: ["bpa.akraino.org"], resources: ["uploads"], verbs: ["update"] }] },
    });
    await bind({ kind: "Role", name: `${name}-replace` }, `${name}-replace`);
  }
  const client = new ApiClient(fixture.url, fixture.tls.ca, await tokenFor(c, ns, name));
  await waitFor(`RBAC to admit ${name}`, async () => (await client.send("GET", "/api/v1/uploads")).status === 200);
  return client;
}

/** The admin kubeconfig impersonating a ServiceAccount (the API runs with only its own rights). */
export function impersonating(kc: KubeConfig, user: string): KubeConfig {
  const out = new KubeConfig();
  out.loadFromString(kc.exportConfig());
  const current = out.getCurrentUser()!;
  out.users = out.users.map((u) => (u.name === current.name ? { ...u, impersonateUser: user } : u));
  return out;
}

/**
 * What `kubectl -n NS create token SA --audience icn-bpa-api` gives (the ServiceAccount is
 * created when missing); `audiences: []` is a plain `kubectl create token` (the cluster's own audience).
 */
export async function tokenFor(c: Clients, ns: string, sa: string, audiences = ["icn-bpa-api"]): Promise<string> {
  await c.core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: sa } } }).catch((error: unknown) => {
    if (!isConflict(error)) throw error;
  });
  const review = await c.core.createNamespacedServiceAccountToken({ namespace: ns, name: sa, body: { spec: { audiences, expirationSeconds: 3600 } } });
  return review.status!.token;
}

export async function startTestApi(kc: KubeConfig, ns: string, stateDir: string, tls: TestTls, env: Record<string, string> = {}): Promise<RunningApi> {
  const config = loadApiConfig(
    { port: 0, host: "127.0.0.1", tlsCert: tls.certFile, tlsKey: tls.keyFile, stateDir },
    { POD_NAMESPACE: ns, BPA_API_RESERVE_BYTES: "0", ...env },
  );
  return startApi(impersonating(kc, `system:serviceaccount:${ns}:bpa-api`), config, testLogger("api"));
}

/** A running API in a namespace of its own, with the RBAC of api.yaml, TLS files and a scratch directory (the store in `work/state`). */
export interface ApiFixture {
  ns: string;
  work: string;
  tls: TestTls;
  api: RunningApi;
  /** https://127.0.0.1:PORT */
  url: string;
  stop(): Promise<void>;
}

/** Starts the API for a test file; `prepare` runs before the API starts (objects it reads at start). */
export async function startApiFixture(
  kc: KubeConfig,
  c: Clients,
  name: string,
  options: { env?: Record<string, string>; prepare?: (ns: string) => Promise<void> } = {},
): Promise<ApiFixture> {
  const ns = await newNamespace(c, name);
  await applyApiRbac(c, ns);
  await options.prepare?.(ns);
  const work = await mkdtemp(join(tmpdir(), `icn-${name}-`));
  const tls = makeServerTls(work);
  const api = await startTestApi(kc, ns, join(work, "state"), tls, options.env);
  return {
    ns,
    work,
    tls,
    api,
    url: `https://127.0.0.1:${api.port}`,
    async stop() {
      await api.stop();
      await deleteNamespace(c, ns);
      await rm(work, { recursive: true, force: true });
    },
  };
}

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

export const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");

/** tus Upload-Metadata: key base64(value) pairs. */
export function tusMetadata(fields: Record<string, string>): string {
  return Object.entries(fields)
    .map(([k, v]) => `${k} ${Buffer.from(v).toString("base64")}`)
    .join(",");
}

export class ApiClient {
  constructor(
    readonly base: string,
    readonly ca: string,
    public token?: string,
  ) {}

  send(method: string, path: string, headers: Record<string, string | number> = {}, body?: Buffer): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const req = request(
        new URL(path, this.base),
        { method, ca: this.ca, headers: { ...(this.token ? { authorization: `Bearer ${this.token}` } : {}), ...headers } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
        },
      );
      req.setTimeout(120_000, () => req.destroy(new Error(`${method} ${path}: no answer in 120 s`)));
      req.on("error", reject);
      req.end(body);
    });
  }

  async json<T = unknown>(path: string): Promise<{ status: number; body: T }> {
    const reply = await this.send("GET", path);
    return { status: reply.status, body: JSON.parse(reply.body) as T };
  }

  /** tus creation; returns the reply (Location on 201). */
  create(fields: Record<string, string>, length: number): Promise<Reply> {
    return this.send("POST", "/api/v1/uploads", {
      "tus-resumable": "1.0.0",
      "upload-length": length,
      "upload-metadata": tusMetadata(fields),
      "content-length": 0,
    });
  }

  patch(location: string, offset: number, data: Buffer): Promise<Reply> {
    return this.send(
      "PATCH",
      location,
      { "tus-resumable": "1.0.0", "upload-offset": offset, "content-type": "application/offset+octet-stream", "content-length": data.length },
      data,
    );
  }

  head(location: string): Promise<Reply> {
    return this.send("HEAD", location, { "tus-resumable": "1.0.0" });
  }

  /** Creates and sends a whole upload in one PATCH; returns the last reply. */
  async upload(kind: string, name: string, data: Buffer, stated = sha256(data)): Promise<Reply> {
    const created = await this.create({ kind, name, sha256: stated }, data.length);
    if (created.status !== 201) return created;
    return this.patch(String(created.headers.location), 0, data);
  }
}
