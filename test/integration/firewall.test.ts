/**
 * The appliance's firewall, the shipped ruleset (overlays/etc/nftables.conf.hbs rendered
 * for the default definition) and the shipped script that fills it from site.env
 * (overlays/usr/lib/icn-bootstrap/firewall), loaded into the real kernel in network
 * namespaces: the appliance, a stranger on the site network, a compute node on the
 * provisioning network and a pod of the bootstrap cluster on its bridge cni0.
 *
 * Stand-in, named so: kube-proxy's NAT (a ClusterIP and the REST API's NodePort DNATed
 * to the pod) is two nft rules here, as kube-proxy's iptables-nft rules are on the appliance;
 * the listeners are a small TCP/UDP server on the ports the appliance's programs use.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadDefinition } from "../../builder/definition.js";
import { BUILTIN_OVERLAYS, renderOverlayTemplate } from "../../builder/stages/overlays.js";

const ns = (name: string) => `icn-fw-${name}-${process.pid}`;
const [APPLIANCE, SITE, NODE, POD] = [ns("app"), ns("site"), ns("node"), ns("pod")] as const;
const SITE_NET = { appliance: "198.51.100.1", host: "198.51.100.2" };
const PROV_NET = { appliance: "172.22.0.1", node: "172.22.0.10" };
const POD_NET = { gateway: "10.244.0.1", pod: "10.244.0.2" };
const CLUSTER_IP = "10.96.0.10";
const ADVERTISE = "10.254.254.254";
const FIREWALL = join(BUILTIN_OVERLAYS, "usr/lib/icn-bootstrap/firewall");

/** Answers "ok" on every TCP port given, and echoes on every UDP port. */
const LISTENER = `
import socket, sys, threading
def tcp(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, peer = s.accept(); c.sendall(b"ok " + peer[0].encode()); c.close()
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
    while True:
        data, peer = s.recvfrom(512); s.sendto(b"ok", peer)
for spec in sys.argv[1:]:
    proto, port = spec.split("/")
    threading.Thread(target=tcp if proto == "tcp" else udp, args=(int(port),), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
`;

/** Whether `from` gets an answer at host:port within a second: "open" (and, for TCP, the address the listener saw), or "closed". */
const PROBE = `
import socket, sys
proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    if proto == "tcp":
        s = socket.create_connection((host, port), timeout=1); answer = s.recv(64).decode()
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1); s.sendto(b"hi", (host, port)); answer = s.recv(64).decode()
except OSError:
    answer = ""
print(answer.replace("ok", "open", 1) if answer.startswith("ok") else "closed")
`;

let work: string;
const listeners: ReturnType<typeof execa>[] = [];
const inNs = (name: string, ...args: string[]) => execa("ip", ["netns", "exec", name, ...args]);

/** "open SOURCE" (TCP: the source address the listener saw), "open" (UDP) or "closed". */
async function probe(from: string, target: string): Promise<string> {
  const match = /^(tcp|udp):\/\/([\d.]+):(\d+)$/.exec(target);
  if (!match) throw new Error(`not a probe target: ${target}`);
  const [, proto, host, port] = match as unknown as [string, string, string, string];
  return String((await inNs(from, "python3", join(work, "probe.py"), proto, host, port)).stdout).trim();
}

async function reach(from: string, target: string): Promise<"open" | "closed"> {
  return (await probe(from, target)).split(" ")[0] as "open" | "closed";
}

/** Each target's reachability from one namespace, probed concurrently: { target: "open" | "closed" }. */
async function reachAll(from: string, targets: string[]): Promise<Record<string, string>> {
  const results = await Promise.all(targets.map((t) => reach(from, t)));
  return Object.fromEntries(targets.map((t, i) => [t, results[i] ?? "closed"]));
}

async function listen(name: string, ports: string[]): Promise<void> {
  const child = execa("ip", ["netns", "exec", name, "python3", "-u", join(work, "listener.py"), ...ports], { reject: false });
  listeners.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (chunk: Buffer) => chunk.toString().includes("listening") && resolve());
    void child.then((r) => reject(new Error(`listener in ${name} exited: ${r.stderr}`)));
  });
}

async function loadRuleset(masquerade: boolean | undefined): Promise<void> {
  const env = join(work, "site.env");
  await writeFile(
    env,
    masquerade === undefined
      ? ""
      : `ICN_PROVISIONING_INTERFACE=prov0\nICN_PROVISIONING_ADDRESS=${PROV_NET.appliance}/24\nICN_PROVISIONING_MASQUERADE=${masquerade}\n`,
  );
  await inNs(APPLIANCE, "nft", "-f", join(work, "nftables.conf"));
  await inNs(APPLIANCE, "sh", FIREWALL, env);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-firewall-"));
  await writeFile(join(work, "listener.py"), LISTENER);
  await writeFile(join(work, "probe.py"), PROBE);
  await writeFile(join(work, "nftables.conf"), await renderOverlayTemplate(join(BUILTIN_OVERLAYS, "etc/nftables.conf.hbs"), await loadDefinition()));
  for (const name of [APPLIANCE, SITE, NODE, POD]) {
    await execa("ip", ["netns", "add", name]);
    await inNs(name, "ip", "link", "set", "lo", "up");
  }
  const veth = async (here: string, there: string, peerNs: string) => {
    await inNs(APPLIANCE, "ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", peerNs);
  };
  await veth("site0", "eth0", SITE);
  await veth("prov0", "eth0", NODE);
  await veth("vethpod", "eth0", POD);
  await inNs(APPLIANCE, "ip", "link", "add", "cni0", "type", "bridge");
  await inNs(APPLIANCE, "ip", "link", "set", "vethpod", "master", "cni0");
  // The appliance's icn0 is a dummy interface; this kernel may lack that module, and a veth holds an address as well.
  await inNs(APPLIANCE, "ip", "link", "add", "icn0", "type", "veth", "peer", "name", "icn0-peer");
  await inNs(APPLIANCE, "ip", "link", "set", "icn0-peer", "up");
  const addresses: [string, string, string][] = [
    [APPLIANCE, "site0", `${SITE_NET.appliance}/24`],
    [APPLIANCE, "prov0", `${PROV_NET.appliance}/24`],
    [APPLIANCE, "cni0", `${POD_NET.gateway}/16`],
    [APPLIANCE, "icn0", `${ADVERTISE}/32`],
    [SITE, "eth0", `${SITE_NET.host}/24`],
    [NODE, "eth0", `${PROV_NET.node}/24`],
    [POD, "eth0", `${POD_NET.pod}/16`],
  ];
  for (const [name, dev, address] of addresses) {
    await inNs(name, "ip", "addr", "add", address, "dev", dev);
    await inNs(name, "ip", "link", "set", dev, "up");
  }
  await inNs(APPLIANCE, "ip", "link", "set", "vethpod", "up");
  // As dnsmasq tells the nodes, and as the CNI plugin routes pods: the appliance is their router.
  await inNs(NODE, "ip", "route", "add", "default", "via", PROV_NET.appliance);
  await inNs(POD, "ip", "route", "add", "default", "via", POD_NET.gateway);
  // The stranger routes everything the appliance has behind it to the appliance.
  for (const net of ["172.22.0.0/24", "10.244.0.0/16", "10.96.0.0/12", `${ADVERTISE}/32`])
    await inNs(SITE, "ip", "route", "add", net, "via", SITE_NET.appliance);
  await inNs(APPLIANCE, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1");
  // Stand-in for kube-proxy: a ClusterIP and the REST API's NodePort, DNATed to the pod.
  const standin = `table ip kube_proxy_standin {\n chain prerouting {\n  type nat hook prerouting priority dstnat; policy accept;\n  ip daddr ${CLUSTER_IP} tcp dport 80 dnat to ${POD_NET.pod}:80\n  fib daddr type local tcp dport 30443 dnat to ${POD_NET.pod}:80\n }\n}\n`;
  await writeFile(join(work, "kube-proxy-standin.nft"), standin);
  await inNs(APPLIANCE, "nft", "-f", join(work, "kube-proxy-standin.nft"));

  await listen(APPLIANCE, ["tcp/22", "tcp/5000", "tcp/8080", "tcp/6443", "tcp/6385", "tcp/6180", "tcp/53", "udp/53", "udp/69", "tcp/10250"]);
  await listen(NODE, ["tcp/22", "tcp/9999", "tcp/10250"]);
  await listen(SITE, ["tcp/80"]);
  await listen(POD, ["tcp/80"]);
}, 60_000);

afterAll(async () => {
  for (const child of listeners) child.kill();
  for (const name of [APPLIANCE, SITE, NODE, POD]) await execa("ip", ["netns", "del", name], { reject: false });
  if (work) await rm(work, { recursive: true, force: true });
});

const behindTheAppliance = [
  `tcp://${PROV_NET.node}:22`,
  `tcp://${PROV_NET.node}:9999`,
  `tcp://${PROV_NET.node}:10250`,
  `tcp://${POD_NET.pod}:80`,
  `tcp://${CLUSTER_IP}:80`,
  `tcp://${ADVERTISE}:10250`,
];

describe("the appliance's firewall (shipped nftables ruleset, in network namespaces)", () => {
  it("without it, a stranger on the site network who routes the provisioning network via the appliance reaches the nodes, and Ironic (the holes it closes)", async () => {
    expect(await reachAll(SITE, behindTheAppliance)).toEqual(Object.fromEntries(behindTheAppliance.map((t) => [t, "open"])));
    expect(await reach(SITE, `tcp://${SITE_NET.appliance}:6385`)).toBe("open");
  });

  it("with it, that stranger reaches nothing behind the appliance: no node, no pod, no Service, no cluster address", { timeout: 30_000 }, async () => {
    await loadRuleset(false);
    expect(await reachAll(SITE, behindTheAppliance)).toEqual(Object.fromEntries(behindTheAppliance.map((t) => [t, "closed"])));
  });

  it(
    "the site network still gets what it is for (SSH, registry, files, the API server, the REST API's NodePort), but not Ironic",
    { timeout: 30_000 },
    async () => {
      await loadRuleset(false);
      const a = SITE_NET.appliance;
      expect(
        await reachAll(SITE, [
          `tcp://${a}:22`,
          `tcp://${a}:5000`,
          `tcp://${a}:8080`,
          `tcp://${a}:6443`,
          `tcp://${a}:30443`,
          `tcp://${a}:6385`,
          `tcp://${a}:6180`,
          `tcp://${PROV_NET.appliance}:6385`,
        ]),
      ).toEqual({
        [`tcp://${a}:22`]: "open",
        [`tcp://${a}:5000`]: "open",
        [`tcp://${a}:8080`]: "open",
        [`tcp://${a}:6443`]: "open",
        [`tcp://${a}:30443`]: "open",
        [`tcp://${a}:6385`]: "closed",
        [`tcp://${a}:6180`]: "closed",
        [`tcp://${PROV_NET.appliance}:6385`]: "closed",
      });
    },
  );

  it("a node reaches the appliance's registry, file server, Ironic, name server and TFTP, and nothing else there or beyond", { timeout: 30_000 }, async () => {
    await loadRuleset(false);
    const a = PROV_NET.appliance;
    expect(
      await reachAll(NODE, [
        `tcp://${a}:5000`,
        `tcp://${a}:8080`,
        `tcp://${a}:6385`,
        `tcp://${a}:6180`,
        `tcp://${a}:53`,
        `udp://${a}:53`,
        `udp://${a}:69`,
        `tcp://${SITE_NET.appliance}:5000`,
      ]),
    ).toEqual({
      [`tcp://${a}:5000`]: "open",
      [`tcp://${a}:8080`]: "open",
      [`tcp://${a}:6385`]: "open",
      [`tcp://${a}:6180`]: "open",
      [`tcp://${a}:53`]: "open",
      [`udp://${a}:53`]: "open",
      [`udp://${a}:69`]: "open",
      // The appliance's site address, as the BPA's configuration names it: still the appliance.
      [`tcp://${SITE_NET.appliance}:5000`]: "open",
    });
    expect(
      await reachAll(NODE, [
        `tcp://${a}:22`,
        `tcp://${a}:30443`,
        `tcp://${a}:6443`,
        `tcp://${a}:10250`,
        `tcp://${SITE_NET.host}:80`,
        `tcp://${POD_NET.pod}:80`,
        `tcp://${CLUSTER_IP}:80`,
      ]),
    ).toEqual({
      [`tcp://${a}:22`]: "closed",
      [`tcp://${a}:30443`]: "closed",
      [`tcp://${a}:6443`]: "closed",
      [`tcp://${a}:10250`]: "closed",
      [`tcp://${SITE_NET.host}:80`]: "closed",
      [`tcp://${POD_NET.pod}:80`]: "closed",
      [`tcp://${CLUSTER_IP}:80`]: "closed",
    });
  });

  it("the bootstrap cluster's pods reach the nodes (kubespray's SSH) and Ironic", { timeout: 30_000 }, async () => {
    await loadRuleset(false);
    expect(await reachAll(POD, [`tcp://${PROV_NET.node}:22`, `tcp://${POD_NET.gateway}:6385`, `tcp://${PROV_NET.appliance}:6385`])).toEqual({
      [`tcp://${PROV_NET.node}:22`]: "open",
      [`tcp://${POD_NET.gateway}:6385`]: "open",
      [`tcp://${PROV_NET.appliance}:6385`]: "open",
    });
  });

  it(
    "with provisioning.masquerade the nodes reach the site network behind the appliance's address, and the site still reaches no node",
    { timeout: 30_000 },
    async () => {
      await loadRuleset(true);
      expect(await probe(NODE, `tcp://${SITE_NET.host}:80`)).toBe(`open ${SITE_NET.appliance}`);
      expect(await reachAll(SITE, behindTheAppliance)).toEqual(Object.fromEntries(behindTheAppliance.map((t) => [t, "closed"])));
    },
  );

  it("without a provisioning network nothing counts as the nodes' side: Ironic answers only the appliance and its pods", { timeout: 30_000 }, async () => {
    await loadRuleset(undefined);
    expect(await reachAll(NODE, [`tcp://${PROV_NET.appliance}:6385`, `tcp://${SITE_NET.host}:80`])).toEqual({
      [`tcp://${PROV_NET.appliance}:6385`]: "closed",
      [`tcp://${SITE_NET.host}:80`]: "closed",
    });
    expect(await reach(POD, `tcp://${POD_NET.gateway}:6385`)).toBe("open");
  });
});
