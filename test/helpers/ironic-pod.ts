/**
 * The appliance's Ironic pod for tests, from the built Ironic image's root: Ironic
 * (ironic-start), and on a provisioning network its boot-file server (nginx) and
 * DHCP/TFTP server (dnsmasq-start), each with bubblewrap and the mounts the pods have
 * (manifests/metal3/ironic.yaml, provisioning/dnsmasq.yaml): the state volume, the
 * credentials Secret as files, the leases directory, and for dnsmasq only the
 * capabilities its Deployment gives it.
 */
import type { ChildProcess } from "node:child_process";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import yaml from "js-yaml";
import { REPO } from "./cli.js";
import { startInImage, stopInImage, unpackImage, type InImageOptions } from "./oci-rootfs.js";

export const IRONIC_IMAGE = "bootstrap.icn:5000/icn/ironic:39.0.0";

export interface Server {
  name: string;
  log: string;
  child: ChildProcess;
}

export interface IronicPod {
  root: string;
  /** The credentials of Secret ironic-credentials (user metal3), and where they are mounted from. */
  password: string;
  auth: string;
  /** dnsmasq's leases file, when it runs. */
  leases?: string;
  servers: Server[];
}

/** Unpacks the Ironic image into work/ironic-root, with the pods' mount points. */
export async function unpackIronic(imagesDir: string, work: string): Promise<string> {
  const root = join(work, "ironic-root");
  await unpackImage(imagesDir, IRONIC_IMAGE, root);
  for (const dir of ["var/lib/ironic", "var/lib/dnsmasq", "auth"]) await mkdir(join(root, dir), { recursive: true });
  return root;
}

export async function startIronicPod(opts: {
  root: string;
  work: string;
  /** The site's provisioning network (ConfigMap ironic-provisioning); with it, httpd and dnsmasq run too. */
  provisioning?: { PROVISIONING_INTERFACE: string; PROVISIONING_ADDRESS: string; DHCP_RANGE: string };
  /** More environment for Ironic (test settings). */
  env?: Record<string, string>;
  /** Where the servers run: the test's network namespace, or the caller's network. */
  network: Pick<InImageOptions, "netns" | "hostNetwork">;
}): Promise<IronicPod> {
  const { root, work, provisioning, network } = opts;
  const auth = join(work, "auth");
  await mkdir(join(auth, "ironic"), { recursive: true });
  const password = `ironic-${Math.random().toString(36).slice(2)}`;
  await writeFile(join(auth, "ironic/username"), "metal3");
  await writeFile(join(auth, "ironic/password"), password);
  const state = join(work, "ironic-state");
  await mkdir(state, { recursive: true });
  const servers: Server[] = [];
  const start = (name: string, command: string[], options: InImageOptions) => {
    const log = join(work, `${name}.log`);
    servers.push({ name, log, child: startInImage(root, command, log, { ...network, ...options }) });
  };
  start("ironic", ["/usr/local/bin/ironic-start"], {
    binds: { [state]: "/var/lib/ironic", [auth]: "/auth" },
    env: { IRONIC_STATE_DIR: "/var/lib/ironic", IRONIC_CREDENTIALS_DIR: "/auth/ironic", ...provisioning, ...opts.env },
  });
  if (!provisioning) return { root, password, auth, servers };
  start("httpd", ["/usr/sbin/nginx", "-e", "stderr", "-c", "/etc/ironic/httpd.conf"], { binds: { [state]: "/var/lib/ironic" } });
  const leases = join(work, "dnsmasq");
  await mkdir(leases, { recursive: true });
  start("dnsmasq", ["/usr/local/bin/dnsmasq-start"], { binds: { [leases]: "/var/lib/dnsmasq" }, env: provisioning, caps: await dnsmasqCapabilities() });
  return { root, password, auth, leases: join(leases, "dnsmasq.leases"), servers };
}

/** The capabilities Deployment ironic-dnsmasq gives dnsmasq (and no others): the tests run it with exactly those. */
export async function dnsmasqCapabilities(): Promise<string[]> {
  const docs = yaml.loadAll(await readFile(join(REPO, "manifests/metal3/provisioning/dnsmasq.yaml"), "utf8")) as {
    kind?: string;
    spec?: { template: { spec: { containers: { name: string; securityContext?: { capabilities?: { add?: string[] } } }[] } } };
  }[];
  const container = docs.find((d) => d?.kind === "Deployment")!.spec!.template.spec.containers.find((c) => c.name === "dnsmasq")!;
  return (container.securityContext?.capabilities?.add ?? []).map((cap) => `CAP_${cap}`);
}

/** Stops every server of the pod and waits until they are gone. */
export async function stopIronicPod(pod: IronicPod | undefined): Promise<void> {
  await Promise.all((pod?.servers ?? []).map((s) => stopInImage(s.child)));
}

/** The end of a server's log, for failure messages. */
export async function logTail(server: Server, chars = 4000): Promise<string> {
  return (await readFile(server.log, "utf8").catch(() => "")).slice(-chars);
}

/** Polls `probe` until it returns a value; fails at once, with its log, when one of `servers` exited, or with what `probe` throws. */
export async function untilServersUp<T>(servers: Server[], what: string, probe: () => Promise<T | undefined>, timeoutMs: number, everyMs = 2000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const s of servers)
      if (typeof s.child.exitCode === "number") throw new Error(`${s.name} exited (${s.child.exitCode}) while waiting for ${what}:\n${await logTail(s)}`);
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`no ${what} within ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
