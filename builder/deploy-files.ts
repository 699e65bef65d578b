/**
 * `icn-bootstrap deploy --files`: a files bundle (builder/files-bundle.ts) unpacked into
 * the chart's own file server (serve.files), through the Kubernetes API as `kubectl cp`
 * does it: `tar -x` in the file server's container, the bundle on its standard input.
 * Nothing needs to reach the node: whoever may exec into the pod may do this.
 */
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { PassThrough, Writable } from "node:stream";
import { CoreV1Api, Exec, type KubeConfig, type V1Status } from "@kubernetes/client-node";
import { UserError } from "./errors.js";
import { formatBytes } from "./log.js";

/** The file server's Deployment, container and store (images/infra-local-controller-chart, serve.files). */
export const FILE_SERVER = { namespace: "bpa-system", deployment: "icn-files", container: "files", root: "/srv/files" } as const;

/** Bytes queued on the WebSocket before reading more of the bundle (the exec stream has no flow control of its own). */
const HIGH_WATER = 8 * 1024 * 1024;

export async function copyFilesBundle(kc: KubeConfig, bundle: string, log: (message: string) => void): Promise<void> {
  // deploy checked it is a file before anything was applied.
  const { size } = await stat(bundle);
  const pod = await readyPod(kc);
  log(`unpacking ${bundle} (${formatBytes(size)}) into ${FILE_SERVER.namespace}/${pod}:${FILE_SERVER.root}`);
  const stdin = new PassThrough();
  const stderr: Buffer[] = [];
  let status: V1Status | undefined;
  const ws = await new Exec(kc).exec(
    FILE_SERVER.namespace,
    pod,
    FILE_SERVER.container,
    ["tar", "-x", "-f", "-", "-C", FILE_SERVER.root, "--no-same-owner", "--no-same-permissions", "--delay-directory-restore"],
    null,
    new Writable({ write: (chunk, _encoding, done) => (stderr.push(chunk as Buffer), done()) }),
    stdin,
    false,
    (s) => (status = s),
  );
  const closed = new Promise<void>((resolve) => ws.on("close", () => resolve()));
  const started = Date.now();
  let sent = 0;
  let reported = started;
  for await (const chunk of createReadStream(bundle, { highWaterMark: 1024 * 1024 })) {
    while (ws.bufferedAmount > HIGH_WATER) await new Promise((r) => setTimeout(r, 20));
    stdin.write(chunk);
    sent += (chunk as Buffer).length;
    if (Date.now() - reported > 15_000) {
      reported = Date.now();
      log(`${formatBytes(sent)} of ${formatBytes(size)} sent`);
    }
  }
  stdin.end();
  await closed;
  if (status?.status !== "Success")
    throw new UserError(
      `unpacking ${bundle} in ${FILE_SERVER.namespace}/${pod} failed: ${status?.message ?? "the connection closed without an exit status"}${stderr.length ? `: ${Buffer.concat(stderr).toString().trim()}` : ""}`,
      "check the file server's store (its volume full, or not writable by 65532?) and run deploy again with --files",
    );
  log(`${formatBytes(size)} unpacked in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

async function readyPod(kc: KubeConfig): Promise<string> {
  const pods = await kc.makeApiClient(CoreV1Api).listNamespacedPod({
    namespace: FILE_SERVER.namespace,
    labelSelector: `app.kubernetes.io/name=${FILE_SERVER.deployment}`,
  });
  const ready = pods.items.find((p) => !p.metadata?.deletionTimestamp && p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
  if (!ready)
    throw new UserError(
      `no ready pod of ${FILE_SERVER.namespace}/${FILE_SERVER.deployment} to unpack the files into`,
      `see 'kubectl -n ${FILE_SERVER.namespace} describe deployment ${FILE_SERVER.deployment}', then run deploy again with --files`,
    );
  return ready.metadata!.name!;
}
