/**
 * Unpacks a built image (the images stage's OCI layout and images.json) into a directory,
 * layer by layer, so tests can run the image's own programs with bubblewrap: the same
 * files, interpreter and libraries as in a pod, without a container runtime.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { runStages, stagesDir, type StagesBuilt } from "../../builder/pipeline.js";
import { IMAGES_JSON, type BuiltImage } from "../../builder/stages/images.js";

export async function unpackImage(imagesDir: string, ref: string, target: string): Promise<BuiltImage> {
  const built = JSON.parse(await readFile(join(imagesDir, IMAGES_JSON), "utf8")) as BuiltImage[];
  const image = built.find((i) => i.ref === ref);
  if (!image) throw new Error(`${ref} is not among the built images (${built.map((i) => i.ref).join(", ")})`);
  await mkdir(target, { recursive: true });
  for (const layer of image.layers) {
    // The project's layers have no whiteouts (each adds files to the base).
    await execa("tar", ["-xf", join(imagesDir, "oci/blobs/sha256", layer.digest.replace("sha256:", "")), "-C", target, "--no-same-owner"]);
  }
  return image;
}

/** The default definition's content stages up to its container images (cached stages, as `build` makes them). */
export async function builtImagesContent(): Promise<StagesBuilt> {
  return runStages({
    definition: await loadDefinition(DEFAULT_DEFINITION),
    lock: await loadLock(DEFAULT_LOCK),
    lockPath: DEFAULT_LOCK,
    stagesDir: stagesDir(),
    sections: ["content"],
    stopAfterImages: true,
  });
}

/** Builds the default definition's images and unpacks `ref` at `target`. */
export async function unpackBuiltImage(ref: string, target: string): Promise<BuiltImage> {
  return unpackImage((await builtImagesContent()).images!.dir, ref, target);
}

export interface InImageOptions {
  binds?: Record<string, string>;
  cwd?: string;
  env?: Record<string, string>;
  /** Share the host's network (loopback servers of the test); default: none at all. */
  hostNetwork?: boolean;
  /** Run in this network namespace (`ip netns exec`), sharing its network; implies hostNetwork. */
  netns?: string;
  /**
   * The only capabilities the program has (bwrap --cap-drop ALL, then --cap-add each), as a
   * pod's `capabilities: {drop: [ALL], add: […]}` gives them, e.g. CAP_NET_ADMIN for a DHCP server.
   */
  caps?: string[];
  /**
   * Run as this user and group id (setpriv before bwrap), as a pod's runAsUser/runAsGroup:
   * the image's files stay root's. The image root's parent directories must be searchable by it.
   */
  uid?: number;
  /** A PID namespace of its own (bwrap --unshare-pid): when it stops, so does every process it started. */
  ownPids?: boolean;
}

function bwrapArgs(root: string, command: string[], opts: InImageOptions): string[] {
  const args = [
    "--ro-bind",
    root,
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    ...(opts.hostNetwork || opts.netns ? [] : ["--unshare-net"]),
    ...(opts.ownPids ? ["--unshare-pid"] : []),
    ...(opts.caps ? ["--cap-drop", "ALL", ...opts.caps.flatMap((cap) => ["--cap-add", cap])] : []),
    "--die-with-parent",
    "--clearenv",
    "--setenv",
    "PATH",
    "/usr/local/bin:/usr/bin:/bin",
    "--setenv",
    "HOME",
    "/tmp",
    "--setenv",
    "ANSIBLE_REMOTE_TMP",
    "/tmp/.ansible/tmp",
    "--setenv",
    "ANSIBLE_LOCAL_TMP",
    "/tmp/.ansible/local",
  ];
  for (const [name, value] of Object.entries(opts.env ?? {})) args.push("--setenv", name, value);
  for (const [host, inside] of Object.entries(opts.binds ?? {})) args.push("--bind", host, inside);
  if (opts.cwd) args.push("--chdir", opts.cwd);
  return [...args, ...command];
}

/** Runs a program of an unpacked image: its root read-only, /tmp private, `binds` (host -> image path) as given. */
/** bwrap, or bwrap inside the options' network namespace. */
function launcher(root: string, command: string[], opts: InImageOptions): [string, string[]] {
  const args = bwrapArgs(root, command, opts);
  const bwrap = opts.uid === undefined ? ["bwrap", ...args] : ["setpriv", `--reuid=${opts.uid}`, `--regid=${opts.uid}`, "--clear-groups", "bwrap", ...args];
  return opts.netns ? ["ip", ["netns", "exec", opts.netns, ...bwrap]] : [bwrap[0]!, bwrap.slice(1)];
}

export function inImage(root: string, command: string[], opts: InImageOptions = {}) {
  return execa(...launcher(root, command, opts), { all: true, reject: false });
}

/**
 * Starts a long-running program of an unpacked image (a server); its output goes to `log`.
 * It runs in a PID namespace of its own, as in a pod, so stopping it (stopInImage) stops
 * every process it started: none is left writing into a directory the test removes next.
 */
export function startInImage(root: string, command: string[], log: string, opts: InImageOptions = {}) {
  // The log file itself as stdout and stderr (not a pipe through this process): programs that open /dev/stdout, as nginx's access_log does, get a file, as a container runtime gives them a FIFO.
  const fd = openSync(log, "a");
  const [file, args] = launcher(root, command, { ...opts, ownPids: true });
  const child = spawn(file, args, { stdio: ["ignore", fd, fd] });
  closeSync(fd);
  return child;
}

/** Stops a server started with startInImage and waits until it is gone: SIGTERM, then SIGKILL after `graceMs`. */
export async function stopInImage(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}
