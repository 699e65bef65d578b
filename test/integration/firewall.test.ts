/**
 * The appliance's firewall, the shipped ruleset (overlays/etc/nftables.conf.hbs rendered
 * for the default definition) and the shipped script that fills it from site.env
 * (overlays/usr/lib/icn-bootstrap/firewall), loaded into the real kernel in network
 * namespaces: the appliance, a stranger on the site network, a compute node on the
 * provisioning network and a pod of the bootstrap cluster on its bridge cni0.
 *
 * nftables.service is played as Debian's unit with the shipped drop-in runs it (start:
 * `nft -f /etc/nftables.conf` and the drop-in's ExecStartPost; reload: `nft -f` again;
 * stop: the drop-in's ExecStop), and the exposure table is measured by connecting from the
 * site's and the nodes' namespaces (test/helpers/exposure.ts, as the boot test measures it).
 *
 * Stand-ins, named so: kube-proxy's NAT (a ClusterIP and the REST API's NodePort DNATed
 * to the pod) is two nft rules here, as kube-proxy's iptables-nft rules are on the appliance;
 * the listeners are a small TCP/UDP server on the ports the appliance's programs use; the
 * ruleset includes the firewall script's file from this test's directory instead of /run.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadDefinition } from "../../builder/definition.js";
import { BUILTIN_OVERLAYS, renderOverlayTemplate } from "../../builder/stages/overlays.js";
import { LISTENERS_COMMAND, measureExposure, parseListeners, probeFrom, readmeExposure } from "../helpers/exposure.js";

const ns = (name: string) => `icn-fw-${name}-${process.pid}`;
const [APPLIANCE, SITE, NODE, POD] = [ns("app"), ns("site"), ns("node"), ns("pod")] as const;
const SITE_NET = { appliance: "198.51.100.1", host: "198.51.100.2" };
const PROV_NET = { appliance: "172.22.0.1", node: "172.22.0.10", bmc: "172.22.0.20" };
const POD_NET = { gateway: "10.244.0.1", pod: "10.244.0.2" };
const CLUSTER_IP = "10.96.0.10";
const ADVERTISE = "10.254.254.254";
const FIREWALL = join(BUILTIN_OVERLAYS, "usr/lib/icn-bootstrap/firewall");
const NFTABLES_DROPIN = join(BUILTIN_OVERLAYS, "etc/systemd/system/nftables.service.d/icn-bootstrap.conf");
/** Where the firewall script writes the site's sets on the appliance, included by the ruleset. */
const SETS_INCLUDE = "/run/icn-bootstrap/firewall/";

/**
 * Answers "ok PEER" on every TCP port given, and "ok" to every UDP datagram: PROTO/PORT,
 * optionally @ADDRESS (default all) and %DEVICE (bound to that interface, as dnsmasq binds).
 */
const LISTENER = `
import socket, sys, threading
def bound(kind, port, address, device):
    s = socket.socket(socket.AF_INET, kind); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if device: s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
    s.bind((address, port)); return s
def tcp(port, address, device):
    s = bound(socket.SOCK_STREAM, port, address, device); s.listen(16)
    while True:
        c, peer = s.accept(); c.sendall(b"ok " + peer[0].encode()); c.close()
def udp(port, address, device):
    s = bound(socket.SOCK_DGRAM, port, address, device)
    while True:
        data, peer = s.recvfrom(512); s.sendto(b"ok", peer)
for spec in sys.argv[1:]:
    spec, _, device = spec.partition("%")
    spec, _, address = spec.partition("@")
    proto, port = spec.split("/")
    threading.Thread(target=tcp if proto == "tcp" else udp, args=(int(port), address or "0.0.0.0", device), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
`;

let work: string;
const listeners: ReturnType<typeof execa>[] = [];
const inNs = (name: string, ...args: string[]) => execa("ip", ["netns", "exec", name, ...args]);

function target(url: string) {
  const match = /^(tcp|udp):\/\/([\d.]+):(\d+)$/.exec(url);
  if (!match) throw new Error(`not a probe target: ${url}`);
  return { proto: match[1] as "tcp" | "udp", host: match[2]!, port: Number(match[3]) };
}

/** "open SOURCE" (TCP: the source address the listener saw), "open" (UDP) or "closed". */
async function probe(from: string, url: string): Promise<string> {
  const [result] = await probeFrom(from, [target(url)], 1);
  return result!.open ? result!.answer.replace(/^ok/, "open").trim() || "open" : "closed";
}

async function reach(from: string, url: string): Promise<"open" | "closed"> {
  return (await probe(from, url)).split(" ")[0] as "open" | "closed";
}

/** Each target's reachability from one namespace, probed concurrently: { target: "open" | "closed" }. */
async function reachAll(from: string, urls: string[]): Promise<Record<string, string>> {
  const results = await probeFrom(from, urls.map(target), 1);
  return Object.fromEntries(urls.map((url, i) => [url, results[i]!.open ? "open" : "closed"]));
}

async function listen(name: string, ports: string[]): Promise<void> {
  const child = execa("ip", ["netns", "exec", name, "python3", "-u", join(work, "listener.py"), ...ports], { reject: false });
  listeners.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (chunk: Buffer) => chunk.toString().includes("listening") && resolve());
    void child.then((r) => reject(new Error(`listener in ${name} exited: ${r.stderr}`)));
  });
}

/** The commands the shipped nftables.service drop-in gives for one key (an empty value resets the list, as in systemd). */
async function dropInCommands(key: "ExecStartPost" | "ExecStop"): Promise<string[][]> {
  const commands: string[][] = [];
  for (const line of (await readFile(NFTABLES_DROPIN, "utf8")).split("\n")) {
    const [name, ...value] = line.split("=");
    if (name !== key) continue;
    if (value.join("=").trim() === "") commands.length = 0;
    else commands.push(value.join("=").trim().split(/\s+/));
  }
  return commands;
}

/** nftables.service's start, as Debian's unit with the drop-in runs it: the ruleset, then ExecStartPost. */
async function startFirewall(): Promise<void> {
  await inNs(APPLIANCE, "nft", "-f", join(work, "nftables.conf"));
  for (const command of await dropInCommands("ExecStartPost")) await inNs(APPLIANCE, ...command);
}

/** nftables.service's stop: the drop-in's ExecStop (which replaces Debian's `nft flush ruleset`). */
async function stopFirewall(): Promise<void> {
  for (const command of await dropInCommands("ExecStop")) await inNs(APPLIANCE, ...command);
}

/** `systemctl reload nftables`: Debian's ExecReload, `nft -f /etc/nftables.conf`. */
async function reloadFirewall(): Promise<void> {
  await inNs(APPLIANCE, "nft", "-f", join(work, "nftables.conf"));
}

/** The boot: nftables.service starts, then icn-site runs the firewall script with the site's settings. */
async function loadRuleset(masquerade: boolean | undefined): Promise<void> {
  const env = join(work, "site.env");
  await writeFile(
    env,
    masquerade === undefined
      ? ""
      : `ICN_PROVISIONING_INTERFACE=prov0\nICN_PROVISIONING_ADDRESS=${PROV_NET.appliance}/24\nICN_PROVISIONING_MASQUERADE=${masquerade}\n`,
  );
  await startFirewall();
  await inNs(APPLIANCE, "sh", FIREWALL, env, join(work, "firewall", "site.nft"));
}

const forwarding = async () => (await inNs(APPLIANCE, "sysctl", "-n", "net.ipv4.ip_forward")).stdout.trim();

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-firewall-"));
  await writeFile(join(work, "listener.py"), LISTENER);
  const ruleset = await renderOverlayTemplate(join(BUILTIN_OVERLAYS, "etc/nftables.conf.hbs"), await loadDefinition());
  await writeFile(join(work, "nftables.conf"), ruleset.replaceAll(SETS_INCLUDE, `${join(work, "firewall")}/`));
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
    // A BMC on the provisioning network (same namespace: only its address and ports matter).
    [NODE, "eth0", `${PROV_NET.bmc}/24`],
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
  // Listeners bound as the appliance's are, on ports the ones above leave free (measured against docs/network-exposure.md).
  await listen(APPLIANCE, ["tcp/5001@127.0.0.1", "tcp/2381@127.0.0.1", "tcp/2379@" + ADVERTISE, "tcp/2380@" + ADVERTISE, "udp/67%prov0"]);
  // The node's SSH, its agent, kubelet and a cluster's API server; its BMC's Redfish (443) and IPMI (623).
  await listen(NODE, ["tcp/22", "tcp/9999", "tcp/10250", "tcp/6443", "tcp/443", "udp/623"]);
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

/** What a node may not open on the appliance: SSH and the API server, on either of its addresses. */
const nodeRefused = [
  `tcp://${PROV_NET.appliance}:22`,
  `tcp://${PROV_NET.appliance}:6443`,
  `tcp://${SITE_NET.appliance}:22`,
  `tcp://${SITE_NET.appliance}:6443`,
];

/** A shipped unit's [Unit] dependencies, from its file and its drop-ins: { BindsTo: [...], After: [...] }. */
async function unitDependencies(unit: string): Promise<Record<string, string[]>> {
  const dir = join(BUILTIN_OVERLAYS, "etc/systemd/system");
  const files = [
    join(dir, unit),
    ...(await readdir(join(dir, `${unit}.d`)).catch(() => [])).filter((f) => f.endsWith(".conf")).map((f) => join(dir, `${unit}.d`, f)),
  ];
  const dependencies: Record<string, string[]> = {};
  for (const file of files) {
    const text = await readFile(file, "utf8").catch(() => "");
    let section = "";
    for (const line of text.split("\n")) {
      if (/^\[.*\]$/.test(line.trim())) section = line.trim();
      const match = /^(\w+)=(.*)$/.exec(line.trim());
      if (section === "[Unit]" && match) (dependencies[match[1]!] ??= []).push(...match[2]!.split(/\s+/).filter(Boolean));
    }
  }
  return dependencies;
}

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
    "that stranger reaches nothing at the provisioning address either: dnsmasq's DNS over TCP, TFTP (an address answers on its own interface only)",
    { timeout: 30_000 },
    async () => {
      await loadRuleset(false);
      const a = PROV_NET.appliance;
      const bound = [`tcp://${a}:53`, `udp://${a}:69`, `tcp://${a}:5000`, `tcp://${a}:8080`];
      expect(await reachAll(SITE, bound)).toEqual(Object.fromEntries(bound.map((t) => [t, "closed"])));
      // The nodes still do, on their own network.
      expect(await reachAll(NODE, bound)).toEqual(Object.fromEntries(bound.map((t) => [t, "open"])));
    },
  );

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

  it(
    "a reload (systemctl reload nftables: nft -f /etc/nftables.conf) keeps the site's sets: a node still reaches neither SSH nor the API server, and its masquerading stays",
    { timeout: 30_000 },
    async () => {
      await loadRuleset(true);
      await reloadFirewall();
      expect(await reachAll(NODE, nodeRefused)).toEqual(Object.fromEntries(nodeRefused.map((t) => [t, "closed"])));
      expect(await probe(NODE, `tcp://${SITE_NET.host}:80`)).toBe(`open ${SITE_NET.appliance}`);
    },
  );

  it("a restart (the drop-in's stop, then Debian's start and the drop-in's ExecStartPost) keeps them too", { timeout: 30_000 }, async () => {
    await loadRuleset(true);
    await stopFirewall();
    await startFirewall();
    expect(await forwarding()).toBe("1");
    expect(await reachAll(NODE, nodeRefused)).toEqual(Object.fromEntries(nodeRefused.map((t) => [t, "closed"])));
    expect(await probe(NODE, `tcp://${SITE_NET.host}:80`)).toBe(`open ${SITE_NET.appliance}`);
  });

  it(
    "stopped, it leaves forwarding off, and the bootstrap cluster (whose every pod start switches forwarding on: the CNI bridge) does not run without it",
    { timeout: 30_000 },
    async () => {
      await loadRuleset(true);
      await stopFirewall();
      expect(await forwarding()).toBe("0");
      const forwarded = [`tcp://${PROV_NET.node}:22`, `tcp://${PROV_NET.node}:9999`, `tcp://${POD_NET.pod}:80`, `tcp://${CLUSTER_IP}:80`];
      expect(await reachAll(SITE, forwarded)).toEqual(Object.fromEntries(forwarded.map((t) => [t, "closed"])));
      expect(await reach(NODE, `tcp://${SITE_NET.host}:80`)).toBe("closed");
      // Not started when the rules did not load, stopped and restarted with them: the units' own words.
      for (const unit of ["containerd.service", "kubelet.service"]) {
        const dependencies = await unitDependencies(unit);
        expect(dependencies.BindsTo ?? [], `${unit} BindsTo=`).toContain("nftables.service");
        expect(dependencies.After ?? [], `${unit} After=`).toContain("nftables.service");
      }
    },
  );

  it(
    "the bootstrap cluster's pods reach on the provisioning network only the nodes' SSH and API servers: no BMC (Redfish, IPMI), no agent, no kubelet; the site network still",
    { timeout: 30_000 },
    async () => {
      await loadRuleset(false);
      expect(
        await reachAll(POD, [
          `tcp://${PROV_NET.node}:22`,
          `tcp://${PROV_NET.node}:6443`,
          `tcp://${PROV_NET.bmc}:443`,
          `udp://${PROV_NET.bmc}:623`,
          `tcp://${PROV_NET.node}:9999`,
          `tcp://${PROV_NET.node}:10250`,
          `tcp://${SITE_NET.host}:80`,
        ]),
      ).toEqual({
        [`tcp://${PROV_NET.node}:22`]: "open",
        [`tcp://${PROV_NET.node}:6443`]: "open",
        [`tcp://${PROV_NET.bmc}:443`]: "closed",
        [`udp://${PROV_NET.bmc}:623`]: "closed",
        [`tcp://${PROV_NET.node}:9999`]: "closed",
        [`tcp://${PROV_NET.node}:10250`]: "closed",
        [`tcp://${SITE_NET.host}:80`]: "open",
      });
    },
  );

  it(
    "measured by connecting from the site's and the nodes' networks (after a reload: what reading the ruleset cannot see), each kind of listener is exposed as docs/network-exposure.md's table says",
    { timeout: 30_000 },
    async () => {
      await loadRuleset(false);
      await reloadFirewall();
      const listeners = parseListeners(String((await inNs(APPLIANCE, ...LISTENERS_COMMAND.split(" "))).stdout));
      const measured = await measureExposure(
        listeners,
        { site: { netns: SITE, appliance: SITE_NET.appliance }, provisioning: { netns: NODE, appliance: PROV_NET.appliance } },
        PROV_NET.appliance,
      );
      const documented = await readmeExposure({ kubernetes: true, provisioningNetwork: true });
      const key = (row: { port: string; addresses: string }) => `${row.port} ${row.addresses}`;
      const standIns = measured.filter((row) => documented.some((d) => key(d) === key(row)));
      // Every kind of binding is measured: all addresses, loopback, icn0, the provisioning interface.
      expect(standIns.map(key)).toEqual([
        "22/tcp all",
        "67/udp provisioning interface",
        "2379/tcp icn0",
        "2380/tcp icn0",
        "2381/tcp loopback",
        "5000/tcp all",
        "5001/tcp loopback",
        "6180/tcp all",
        "6385/tcp all",
        "6443/tcp all",
        "8080/tcp all",
      ]);
      expect(standIns).toEqual(documented.filter((d) => standIns.some((row) => key(row) === key(d))));
    },
  );
});
