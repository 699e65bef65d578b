/**
 * STAND-IN for the kubelet and the Job controller, where a test has a real kube-apiserver
 * but no nodes: it runs the one container of a Job's pod template as a kubelet would, from
 * the image's unpacked root filesystem (test/helpers/oci-rootfs.ts) under bubblewrap, and
 * writes the Job's status as the Job controller would.
 *
 * What a pod would get, it gets: the image's entrypoint, environment and working
 * directory; the container's args and env (values and metadata.namespace field refs); its
 * configMap and secret volumes (items, paths, defaultMode) at their mount paths, read-only;
 * a ServiceAccount token of the pod's ServiceAccount (TokenRequest) with the API server's
 * CA at /var/run/secrets/kubernetes.io/serviceaccount; KUBERNETES_SERVICE_HOST/PORT; the
 * termination message file at /dev/termination-log; emptyDir volumes. The network is the
 * caller's. It runs the container as root: the pod's securityContext (the runner's pods run
 * as nobody) is not applied here; test/integration/least-privilege.test.ts runs the runner
 * image's programs as nobody.
 */
import { chmod, mkdir, mkdtemp, readFile, readlink, writeFile } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import type { AuthenticationV1TokenRequest, V1Job, V1Volume } from "@kubernetes/client-node";
import { execa } from "execa";
import type { Clients } from "../../bpa/runtime/kube.js";
import { setJobStatus } from "./operator-suite.js";

export interface ImageConfig {
  entrypoint: string[];
  cmd: string[];
  env: Record<string, string>;
  workingDir?: string;
}

/** The image's own config (entrypoint, cmd, env, working directory) from an OCI layout. */
export async function readImageConfig(layoutDir: string, manifestDigest: string): Promise<ImageConfig> {
  const blob = async (digest: string) => JSON.parse(await readFile(join(layoutDir, "blobs/sha256", digest.replace("sha256:", "")), "utf8"));
  const manifest = await blob(manifestDigest);
  const { config = {} } = await blob(manifest.config.digest);
  const env = Object.fromEntries((config.Env ?? []).map((e: string) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]));
  return { entrypoint: config.Entrypoint ?? [], cmd: config.Cmd ?? [], env, workingDir: config.WorkingDir || undefined };
}

export interface JobRun {
  exitCode: number;
  /** What the container wrote to /dev/termination-log. */
  terminationMessage: string;
}

export interface JobStandInOptions {
  c: Clients;
  job: V1Job;
  /** The unpacked image named by the container's image. */
  rootfs: string;
  image: ImageConfig;
  /** The API server as pods reach it, and its CA (PEM). */
  apiServer: URL;
  apiServerCa: string;
  /** A scratch directory for the volumes. */
  work: string;
  /** Environment added to the container's (e.g. ansible's callbacks for a test's timings). */
  extraEnv?: Record<string, string>;
  onLine?: (line: string) => void;
}

/** Runs the Job's container to its end and writes the Job's status (running, then succeeded or failed). */
export async function runJobAsKubelet(opts: JobStandInOptions): Promise<JobRun> {
  const { c, job } = opts;
  const namespace = job.metadata!.namespace!;
  const pod = job.spec!.template.spec!;
  if (pod.containers.length !== 1) throw new Error(`the stand-in runs Jobs of one container; ${job.metadata!.name} has ${pod.containers.length}`);
  const container = pod.containers[0]!;
  const dir = await mkdtemp(join(opts.work, `job-${job.metadata!.name}-`));

  const binds: string[] = [];
  for (const mount of container.volumeMounts ?? []) {
    const volume = pod.volumes?.find((v) => v.name === mount.name);
    if (!volume) throw new Error(`volume ${mount.name} of ${job.metadata!.name} is not defined`);
    const source = join(dir, "volumes", mount.name);
    await materialize(c, namespace, volume, source);
    binds.push(mount.readOnly ? "--ro-bind" : "--bind", source, await mountPoint(opts.rootfs, mount.mountPath));
  }
  const sa = join(dir, "serviceaccount");
  await mkdir(sa, { recursive: true });
  const token = await c.core.createNamespacedServiceAccountToken({
    name: pod.serviceAccountName ?? "default",
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 6 * 3600 } } as AuthenticationV1TokenRequest,
  });
  await writeFile(join(sa, "token"), token.status!.token);
  await writeFile(join(sa, "ca.crt"), opts.apiServerCa);
  await writeFile(join(sa, "namespace"), namespace);
  binds.push("--ro-bind", sa, await mountPoint(opts.rootfs, "/var/run/secrets/kubernetes.io/serviceaccount"));
  const termination = join(dir, "termination-log");
  await writeFile(termination, "");
  binds.push("--bind", termination, "/dev/termination-log");

  const env: Record<string, string> = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root", ...opts.image.env };
  for (const e of container.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.namespace") env[e.name] = namespace;
    else throw new Error(`env ${e.name} of ${job.metadata!.name}: the stand-in knows values and metadata.namespace only`);
  }
  Object.assign(env, { KUBERNETES_SERVICE_HOST: opts.apiServer.hostname, KUBERNETES_SERVICE_PORT: opts.apiServer.port || "443" }, opts.extraEnv);
  const command = [...(container.command ?? opts.image.entrypoint), ...(container.args ?? (container.command ? [] : opts.image.cmd))];

  const args = ["--bind", opts.rootfs, "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--die-with-parent", "--clearenv", ...binds];
  for (const [name, value] of Object.entries(env)) args.push("--setenv", name, value);
  args.push("--chdir", container.workingDir ?? opts.image.workingDir ?? "/");

  await setJobStatus(c, namespace, job.metadata!.name!, "running");
  const child = execa("bwrap", [...args, ...command], { reject: false, all: true, buffer: false });
  let pending = "";
  child.all?.on("data", (chunk: Buffer) => {
    const lines = (pending + chunk.toString()).split("\n");
    pending = lines.pop() ?? "";
    for (const line of lines) opts.onLine?.(line);
  });
  const result = await child;
  if (pending) opts.onLine?.(pending);
  const exitCode = result.exitCode ?? 128;
  await setJobStatus(c, namespace, job.metadata!.name!, exitCode === 0 ? "succeeded" : "failed");
  return { exitCode, terminationMessage: await readFile(termination, "utf8") };
}

/**
 * The directory a mount path names inside the image, made when missing: bwrap does not
 * follow the image's symlinks (Debian's /var/run -> /run), so they are resolved here.
 */
async function mountPoint(rootfs: string, path: string): Promise<string> {
  let resolved = "/";
  const parts = path.split("/").filter(Boolean);
  for (let i = 0, hops = 0; i < parts.length; i++) {
    const next = posix.join(resolved, parts[i]!);
    const target = await readlink(join(rootfs, next)).catch(() => undefined);
    if (target !== undefined && hops++ < 40) {
      parts.splice(i + 1, 0, ...target.split("/").filter(Boolean));
      if (target.startsWith("/")) resolved = "/";
      continue;
    }
    resolved = next;
  }
  await mkdir(join(rootfs, resolved), { recursive: true });
  return resolved;
}

/** A configMap or secret volume as the kubelet lays it out: each item at its path (every key when none), with defaultMode. */
async function materialize(c: Clients, namespace: string, volume: V1Volume, target: string): Promise<void> {
  let data: Record<string, Buffer>;
  let items;
  let mode: number;
  if (volume.configMap) {
    const cm = await c.core.readNamespacedConfigMap({ namespace, name: volume.configMap.name! });
    data = Object.fromEntries(Object.entries(cm.data ?? {}).map(([k, v]) => [k, Buffer.from(v)]));
    ({ items } = volume.configMap);
    mode = volume.configMap.defaultMode ?? 0o644;
  } else if (volume.secret) {
    const secret = await c.core.readNamespacedSecret({ namespace, name: volume.secret.secretName! });
    data = Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64")]));
    ({ items } = volume.secret);
    mode = volume.secret.defaultMode ?? 0o644;
  } else if (volume.emptyDir) {
    // As the kubelet makes one: empty, writable by whichever user the pod runs as.
    await mkdir(target, { recursive: true });
    await chmod(target, 0o777);
    return;
  } else {
    throw new Error(`volume ${volume.name}: the stand-in knows configMap, secret and emptyDir volumes only`);
  }
  await mkdir(target, { recursive: true });
  for (const { key, path, mode: itemMode } of items ?? Object.keys(data).map((key) => ({ key, path: key, mode: undefined }))) {
    if (!(key in data)) throw new Error(`volume ${volume.name}: key ${key} is missing`);
    const file = join(target, path);
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, data[key]!);
    await chmod(file, itemMode ?? mode);
  }
}
