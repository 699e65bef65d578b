/**
 * The BPA operator's entry point.
 *
 *   npm run bpa -- [--kubeconfig PATH] [--config FILE] [--watch-namespace NS] [--no-leader-elect]
 *   npm run bpa -- api [--port 8443 --tls-cert FILE --tls-key FILE]   (the REST API, bpa/rest/)
 *
 * In the appliance it runs in-cluster (manifests/bpa/deployment.yaml); on a workstation it
 * runs against the current kubeconfig.
 */
import { createServer, type Server } from "node:http";
import { parseArgs } from "node:util";
import { formatError, UserError } from "../common/errors.js";
import { loadConfig } from "./config/config.js";
import { loadKubeConfig } from "./runtime/kube.js";
import { makeLogger } from "./runtime/log.js";
import { Operator } from "./operator.js";
import { runApi } from "./rest/main.js";

const HELP = `bpa — the Binary Provisioning Agent operator (Provisioning -> kubespray install)

usage: bpa [options]
       bpa api [options]      the REST API (uploads, install status): bpa api --help

  --kubeconfig PATH       kubeconfig to use (default: KUBECONFIG, ~/.kube/config, or in-cluster)
  --config FILE           operator configuration, YAML (default: BPA_CONFIG)
  --namespace NS          the operator's namespace, for the leader Lease (default: POD_NAMESPACE or bpa-system)
  --watch-namespace NS    only watch this namespace (default: all)
  --host-namespace NS     take BareMetalHosts from this namespace (default: the Provisioning's)
  --no-leader-elect       run the controller without leader election (one replica only!)
  --health-port PORT      serve /healthz and /readyz on PORT (default 8081, 0 = off)
  -h, --help              this help

Configuration fields can also be set with BPA_RUNNER_IMAGE, BPA_REGISTRY_HOST,
BPA_FILES_REPO, BPA_SSH_USER, BPA_WATCH_NAMESPACE, BPA_HOST_NAMESPACE (see bpa/README.md).
`;

function serveHealth(port: number, operator: Operator): Server | undefined {
  if (!port) return undefined;
  const server = createServer((req, res) => {
    if (req.url === "/healthz") {
      res.writeHead(200).end("ok\n");
    } else if (req.url === "/readyz") {
      // Ready = leading with a running controller, or a standby candidate (both are healthy replicas).
      res.writeHead(200).end(operator.isLeader() ? "leader\n" : "standby\n");
    } else {
      res.writeHead(404).end();
    }
  });
  server.listen(port);
  return server;
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === "api") return runApi(argv.slice(1));
  const { values } = parseArgs({
    args: argv,
    options: {
      kubeconfig: { type: "string" },
      config: { type: "string" },
      namespace: { type: "string" },
      "watch-namespace": { type: "string" },
      "host-namespace": { type: "string" },
      "no-leader-elect": { type: "boolean", default: false },
      "health-port": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const log = makeLogger();
  const overrides: Record<string, unknown> = {};
  if (values.namespace) overrides.namespace = values.namespace;
  if (values["watch-namespace"] !== undefined) overrides.watchNamespace = values["watch-namespace"];
  if (values["host-namespace"] !== undefined) overrides.hostNamespace = values["host-namespace"];
  const file = values.config ?? process.env.BPA_CONFIG;
  let config = loadConfig({ ...(file ? { file } : {}), overrides });
  if (values["no-leader-elect"]) config = { ...config, leaderElection: { ...config.leaderElection, enabled: false } };
  const kc = loadKubeConfig(values.kubeconfig);
  log.info("starting", {
    server: kc.getCurrentCluster()?.server,
    watchNamespace: config.watchNamespace || "(all)",
    hostNamespace: config.hostNamespace || "(the Provisioning's)",
    leaderElection: config.leaderElection.enabled,
  });
  let exitCode = 0;
  const operator = new Operator({
    kc,
    config,
    log,
    onLostLeadership: (reason) => {
      log.error("leadership lost; exiting so that a fresh process campaigns again", { reason });
      exitCode = 1;
      void shutdown();
    },
  });
  const port = Number(values["health-port"] ?? process.env.BPA_HEALTH_PORT ?? 8081);
  const health = serveHealth(port, operator);
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));
  let shuttingDown = false;
  const shutdown = async () => {
    if (shuttingDown) return;
    shuttingDown = true;
    log.info("stopping");
    await operator.stop();
    health?.close();
    done();
  };
  process.on("SIGTERM", () => void shutdown());
  process.on("SIGINT", () => void shutdown());
  await operator.start();
  await finished;
  return exitCode;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${formatError(error)}\n`);
    process.exit(error instanceof UserError ? 2 : 1);
  },
);
