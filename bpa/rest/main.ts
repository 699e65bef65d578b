/**
 * `bpa api`: the REST API as its own process (manifests/bpa/api.yaml runs it as the
 * Deployment bpa-api). It reads the registry's push credentials and CA from the cluster
 * at every push, so a rotation needs no restart.
 */
import { parseArgs } from "node:util";
import type { KubeConfig } from "@kubernetes/client-node";
import { errorMessage, loadKubeConfig, makeClients, type Clients } from "../runtime/kube.js";
import { makeLogger, type Logger } from "../runtime/log.js";
import { Authenticator, REPLACE_OTHERS_UPLOADS, UPLOAD_APPLIANCE_IMAGES } from "./auth.js";
import { loadApiConfig, type ApiConfig } from "./config.js";
import { RegistryClient } from "./registry.js";
import { ApiServer, UPLOADS_PATH } from "./server.js";
import { Store } from "./store.js";
import { ApplianceUpgrades } from "./appliance-upgrade.js";
import { Uploads } from "./uploads.js";

export const API_HELP = `bpa api — the BPA's REST API: resumable uploads (tus), install status, status page

usage: bpa api [options]

  --kubeconfig PATH     kubeconfig (default: KUBECONFIG, ~/.kube/config, or in-cluster)
  --port PORT           listen port (BPA_API_PORT, default 8443)
  --tls-cert FILE       server certificate, PEM (BPA_API_TLS_CERT)
  --tls-key FILE        its key (BPA_API_TLS_KEY)
  --plain-http          no TLS (a workstation only; never on the site network)
  --state-dir DIR       uploads and published files (BPA_API_STATE_DIR, default /var/lib/icn-bootstrap/bpa-api)
  -h, --help            this help

More settings by environment (docs/rest-api.md): BPA_API_MAX_UPLOAD_BYTES,
BPA_API_RESERVE_BYTES, BPA_API_PUBLIC_FILES_URL, BPA_API_REGISTRY_URL, BPA_API_PULL_HOST, ...
`;

/** Reads the registry's push credentials (Secret) and CA (ConfigMap) for one push. */
export function registryAccess(clients: Clients, config: ApiConfig) {
  return async () => {
    const ns = config.namespace;
    let secret, caMap;
    try {
      secret = await clients.core.readNamespacedSecret({ namespace: ns, name: config.pushSecret });
      caMap = await clients.core.readNamespacedConfigMap({ namespace: ns, name: config.caConfigMap });
    } catch (error) {
      throw new Error(
        `cannot read the registry's push credentials (Secret ${ns}/${config.pushSecret}) or CA (ConfigMap ${ns}/${config.caConfigMap}): ${errorMessage(error)}; the appliance's first boot creates them`,
      );
    }
    const field = (k: string) => Buffer.from(secret.data?.[k] ?? "", "base64").toString("utf8");
    const ca = caMap.data?.[config.caKey];
    if (!ca) throw new Error(`ConfigMap ${ns}/${config.caConfigMap} has no key ${config.caKey} (the registry's site CA)`);
    const client = new RegistryClient({ url: config.registryUrl, ca, username: field("username"), password: field("password") });
    return { client, pullHost: config.pullHost };
  };
}

/**
 * Where published files are fetched: the configured URL, else the host the caller used to
 * reach this API at the file server's port 8080 (the same appliance, as the caller sees it).
 */
export function filesBase(config: ApiConfig, host: string | undefined): string {
  if (config.publicFilesUrl) return config.publicFilesUrl;
  const hostname = (host ?? "bootstrap.icn").replace(/:\d+$/, "");
  return `http://${hostname}:8080`;
}

export interface RunningApi {
  port: number;
  server: ApiServer;
  uploads: Uploads;
  stop(): Promise<void>;
}

/** Starts the API (tests call this in-process). */
export async function startApi(kc: KubeConfig, config: ApiConfig, log: Logger): Promise<RunningApi> {
  const clients = makeClients(kc);
  const auth = new Authenticator(kc, config.namespace, config.tokenAudience);
  const store = new Store(config.stateDir);
  const uploads = new Uploads({
    store,
    path: UPLOADS_PATH,
    maxUploadBytes: config.maxUploadBytes,
    reserveBytes: config.reserveBytes,
    expirationMs: config.expirationHours * 3600_000,
    filesBase: (host) => filesBase(config, host ?? undefined),
    registry: registryAccess(clients, config),
    clients,
    namespace: config.namespace,
    mayReplaceOthers: (caller) => auth.allowed(caller, REPLACE_OTHERS_UPLOADS),
    authorizeApplianceImages: (caller) => auth.authorize(caller, UPLOAD_APPLIANCE_IMAGES),
    log,
  });
  await uploads.start();
  const server = new ApiServer({
    uploads,
    upgrades: new ApplianceUpgrades(store.applianceUpgrade),
    filesBase: (host) => filesBase(config, host),
    auth,
    clients,
    namespace: config.namespace,
    log,
    ...(config.plainHttp ? {} : { tls: { certFile: config.tlsCert!, keyFile: config.tlsKey!, reloadMs: config.tlsReloadSeconds * 1000 } }),
  });
  const port = await server.listen(config.port, config.host);
  log.info("REST API listening", { port, tls: !config.plainHttp, stateDir: config.stateDir });
  return {
    port,
    server,
    uploads,
    async stop() {
      uploads.stop();
      await server.close();
    },
  };
}

export async function runApi(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      kubeconfig: { type: "string" },
      port: { type: "string" },
      "tls-cert": { type: "string" },
      "tls-key": { type: "string" },
      "plain-http": { type: "boolean" },
      "state-dir": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(API_HELP);
    return 0;
  }
  const config = loadApiConfig({
    port: values.port,
    tlsCert: values["tls-cert"],
    tlsKey: values["tls-key"],
    plainHttp: values["plain-http"],
    stateDir: values["state-dir"],
  });
  const kc = loadKubeConfig(values.kubeconfig);
  const log = makeLogger({ fields: { component: "api" } });
  const api = await startApi(kc, config, log);
  await new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  log.info("stopping");
  await api.stop();
  return 0;
}
