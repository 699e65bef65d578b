/**
 * The appliance's network exposure, measured: every listener the appliance shows (`ss`), and
 * for each whether a connection to it succeeds from the site network and from the
 * provisioning network — a TCP connect, a UDP datagram that gets an answer — made from a
 * network namespace on each network. Compared with the table of docs/network-exposure.md,
 * which is therefore never kept by hand alone.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { REPO } from "./cli.js";

/** Where a listener is bound, in the words of docs/network-exposure.md. */
export type AddressClass = "all" | "loopback" | "icn0" | "provisioning interface";

export interface ExposureRow {
  /** e.g. "6385/tcp"; "random/tcp" for containerd's streaming port. */
  port: string;
  addresses: AddressClass;
  site: "yes" | "no";
  provisioning: "yes" | "no";
}

/** When a row applies: every appliance, one with its Kubernetes cluster, one with a provisioning network too. */
export type Applies = "always" | "Kubernetes" | "provisioning network";

export interface Listener {
  proto: "tcp" | "udp";
  address: string;
  port: string;
  program: string;
}

/** What the appliance lists as listening, one per line (`parseListeners` reads it). */
export const LISTENERS_COMMAND = "ss -Htlnup";

/** The bootstrap cluster's advertise address, on the appliance's icn0 (the definition's default). */
export const ICN0_ADDRESS = "10.254.254.254";

/** `ss -Htlnup` output: one listener per line. */
export function parseListeners(ss: string): Listener[] {
  return ss
    .split("\n")
    .filter((line) => line.trim())
    .map((line) => {
      const fields = line.trim().split(/\s+/);
      const local = fields[4] ?? "";
      const at = local.lastIndexOf(":");
      return {
        proto: fields[0] === "udp" ? "udp" : "tcp",
        address: local.slice(0, at),
        port: local.slice(at + 1),
        program: /users:\(\("([^"]+)"/.exec(line)?.[1] ?? "",
      };
    });
}

export type Network = "site" | "provisioning";

/** A place to measure from: a network namespace on one of the appliance's networks, and the appliance's address there. */
export interface Vantage {
  netns: string;
  appliance: string;
}

export interface ProbeTarget {
  proto: "tcp" | "udp";
  host: string;
  port: number;
}

/** What a probe saw: whether the listener answered, and the first bytes it sent (TCP: if any within a moment). */
export interface ProbeResult {
  open: boolean;
  answer: string;
}

/**
 * Probes every target at once (one thread each) and prints one JSON result per target.
 * TCP: open when the connection is accepted. UDP: open when an answer comes back (a
 * refusal, ICMP port unreachable, or silence is closed); DNS, TFTP and DHCP get a request
 * of their protocol, so that their servers answer.
 */
const PROBE = `
import json, socket, struct, sys, threading
timeout = float(sys.argv[1]); targets = json.loads(sys.argv[2]); results = [None] * len(targets)
def request(port):
    if port == 53:
        name = b"".join(bytes([len(p)]) + p for p in b"bootstrap.icn".split(b"."))
        return struct.pack(">HHHHHH", 0x1c3b, 0x0100, 1, 0, 0, 0) + name + b"\\0" + struct.pack(">HH", 1, 1)
    if port == 69:
        return b"\\0\\1icn-exposure-probe\\0octet\\0"
    if port == 67:
        return struct.pack(">BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0, 0x1c3b1c3b, 0, 0x8000, bytes(4), bytes(4), bytes(4), bytes(4), bytes.fromhex("525400ee00ee"), b"", b"") + bytes([99, 130, 83, 99, 53, 1, 1, 255])
    return b"icn-exposure-probe\\n"
def probe(i, proto, host, port):
    answer, is_open = b"", False
    try:
        if proto == "tcp":
            s = socket.create_connection((host, port), timeout=timeout); is_open = True
            s.settimeout(0.3)
            try: answer = s.recv(64)
            except OSError: pass
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(timeout)
            if port == 67:  # a DHCP server answers the client's port, to the broadcast address
                s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1); s.bind(("0.0.0.0", 68)); s.sendto(request(port), (host, port))
            elif port == 69:  # a TFTP server answers from a port of its own: no connect(), which would drop that answer
                s.sendto(request(port), (host, port))
            else:
                s.connect((host, port)); s.send(request(port))
            answer = s.recv(512); is_open = True
        s.close()
    except OSError:
        pass
    results[i] = {"open": is_open, "answer": answer.decode("latin-1")}
threads = [threading.Thread(target=probe, args=(i, *t)) for i, t in enumerate(targets)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(results))
`;

/** Connects from a network namespace to each target, all at once: whether each answered. */
export async function probeFrom(netns: string, targets: ProbeTarget[], timeoutSeconds = 2): Promise<ProbeResult[]> {
  if (targets.length === 0) return [];
  const json = JSON.stringify(targets.map((t) => [t.proto, t.host, t.port]));
  const { stdout } = await execa("ip", ["netns", "exec", netns, "python3", "-c", PROBE, String(timeoutSeconds), json]);
  return JSON.parse(stdout) as ProbeResult[];
}

/**
 * A site network and a provisioning network for an appliance VM, each a network namespace
 * holding the host side of one of the VM's NICs (a tap): a stranger on the site network,
 * who routes the provisioning network and icn0's address to the appliance, and a compute
 * node on the provisioning network, whose router the appliance is. QEMU creates the taps
 * in this process's namespace (`extraTaps`); `attach` moves them into theirs once they
 * exist, so the VM's other NIC (QEMU's user network, SSH forwarded) stays where it was.
 */
export interface MeasuringNetworks {
  /** For bootImage's extraTaps: the guest names them enp0s5 (site) and enp0s6 (provisioning). */
  taps: { ifname: string; mac: string; pciSlot: number }[];
  /** The site.yaml lines that give the appliance these two networks. */
  siteYaml: string;
  site: Vantage;
  provisioning: Vantage;
  provisioningAddress: string;
  /** Waits for QEMU's taps (while the VM boots) and puts each on its network; again at every boot. */
  attach: (timeoutMs?: number) => Promise<void>;
  /** A VM booting with `taps`, attached meanwhile: its result, or why the networks failed if it came up. */
  during: <T extends { ready: boolean }>(booting: Promise<T>) => Promise<T>;
  remove: () => Promise<void>;
}

export function measuringNetworks(): MeasuringNetworks {
  const id = process.pid.toString(36);
  const sides = [
    { name: "site", netns: `icn-exp-site-${id}`, ifname: `icnx${id}s`, mac: "52:54:00:51:00:05", pciSlot: 5, appliance: "198.51.100.1", host: "198.51.100.2" },
    {
      name: "provisioning",
      netns: `icn-exp-prov-${id}`,
      ifname: `icnx${id}p`,
      mac: "52:54:00:22:00:06",
      pciSlot: 6,
      appliance: "172.22.0.1",
      host: "172.22.0.10",
    },
  ] as const;
  const [site, prov] = sides;
  const inNs = (netns: string, ...args: string[]) => execa("ip", ["netns", "exec", netns, ...args]);
  const exists = async (ifname: string) => (await execa("ip", ["link", "show", ifname], { reject: false })).exitCode === 0;
  const networks: MeasuringNetworks = {
    taps: sides.map(({ ifname, mac, pciSlot }) => ({ ifname, mac, pciSlot })),
    siteYaml: [
      "network:",
      `  interfaces: [{ name: enp0s${site.pciSlot}, address: ${site.appliance}/24 }]`,
      "provisioning:",
      `  interface: enp0s${prov.pciSlot}`,
      `  address: ${prov.appliance}/24`,
      "  dhcpRange: 172.22.0.100-172.22.0.200",
      "",
    ].join("\n"),
    site: { netns: site.netns, appliance: site.appliance },
    provisioning: { netns: prov.netns, appliance: prov.appliance },
    provisioningAddress: prov.appliance,
    attach: async (timeoutMs = 120_000) => {
      for (const side of sides) {
        await execa("ip", ["netns", "add", side.netns], { reject: false });
        await inNs(side.netns, "ip", "link", "set", "lo", "up");
      }
      const deadline = Date.now() + timeoutMs;
      for (const side of sides) {
        while (!(await exists(side.ifname))) {
          if (Date.now() > deadline) throw new Error(`QEMU made no tap ${side.ifname} within ${timeoutMs / 1000} s (did the VM start?)`);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        await execa("ip", ["link", "set", side.ifname, "netns", side.netns]);
        await inNs(side.netns, "ip", "addr", "add", `${side.host}/24`, "dev", side.ifname);
        await inNs(side.netns, "ip", "link", "set", side.ifname, "up");
      }
      // The stranger routes everything the appliance has behind it to the appliance; the node's router is the appliance.
      for (const net of ["172.22.0.0/24", `${ICN0_ADDRESS}/32`]) await inNs(site.netns, "ip", "route", "replace", net, "via", site.appliance);
      await inNs(prov.netns, "ip", "route", "replace", "default", "via", prov.appliance);
    },
    during: async (booting) => {
      const [booted, attached] = await Promise.allSettled([booting, networks.attach()]);
      if (booted.status === "rejected") throw booted.reason;
      if (attached.status === "rejected" && booted.value.ready) throw attached.reason;
      return booted.value;
    },
    remove: async () => {
      for (const side of sides) await execa("ip", ["netns", "del", side.netns], { reject: false });
    },
  };
  return networks;
}

function addressClass(address: string, provisioningAddress: string | undefined): AddressClass | string {
  // ss writes "[::1]", "127.0.0.53%lo", "[fe80::1]%eth0", "*".
  const [ip = "", device] = address.split("%");
  const bare = ip.replace(/^\[|\]$/g, "");
  if (device === "lo" || bare.startsWith("127.") || bare === "::1") return "loopback";
  if (device && device !== "lo") return device === "icn0" ? "icn0" : "provisioning interface";
  if (bare === "0.0.0.0" || bare === "::" || bare === "*") return "all";
  if (bare === ICN0_ADDRESS) return "icn0";
  if (provisioningAddress && bare === provisioningAddress) return "provisioning interface";
  return bare;
}

/**
 * Where a listener is tried from a network: the address it is bound to, as a host on that
 * network would send there (the vantage routes the appliance's other addresses via the
 * appliance), or the appliance's own address on that network when it listens on all.
 * Loopback is tried at that address too; when another listener holds the same port there,
 * the kernel's rule stands instead (127.0.0.0/8 and ::1 arriving from a network are dropped).
 */
function targetFor(addresses: AddressClass, vantage: Vantage, provisioningAddress: string): string {
  if (addresses === "icn0") return ICN0_ADDRESS;
  if (addresses === "provisioning interface") return provisioningAddress;
  return vantage.appliance;
}

/**
 * The exposure table the appliance's listeners make, measured from each network: one row per
 * port and address class, sorted.
 */
export async function measureExposure(
  listeners: Listener[],
  from: Record<Network, Vantage>,
  provisioningAddress: string,
  timeoutSeconds = 2,
): Promise<ExposureRow[]> {
  const rows = new Map<string, { row: ExposureRow; port: number; proto: "tcp" | "udp" }>();
  for (const listener of listeners) {
    // The DHCP client's socket (systemd-networkd) answers only its own exchanges.
    if (listener.proto === "udp" && listener.port === "68") continue;
    const addresses = addressClass(listener.address, provisioningAddress);
    if (!["all", "loopback", "icn0", "provisioning interface"].includes(addresses))
      throw new Error(
        `listener ${listener.proto} ${listener.address}:${listener.port} (${listener.program}) is bound to an address the table has no words for`,
      );
    const ephemeral = listener.program === "containerd" && addresses === "loopback" && Number(listener.port) > 32767;
    const port = `${ephemeral ? "random" : listener.port}/${listener.proto}`;
    rows.set(`${port} ${addresses}`, {
      row: { port, addresses: addresses as AddressClass, site: "no", provisioning: "no" },
      port: Number(listener.port),
      proto: listener.proto,
    });
  }
  for (const network of ["site", "provisioning"] as const) {
    const vantage = from[network];
    const answersThere = (entry: { row: ExposureRow }) => targetFor(entry.row.addresses, vantage, provisioningAddress) === vantage.appliance;
    const heldElsewhere = (entry: { row: ExposureRow; port: number; proto: string }) =>
      [...rows.values()].some((other) => other.row.addresses !== "loopback" && other.port === entry.port && other.proto === entry.proto && answersThere(other));
    const measured = [...rows.values()].filter((entry) => entry.row.addresses !== "loopback" || !heldElsewhere(entry));
    const targets = measured.map((entry) => ({ proto: entry.proto, host: targetFor(entry.row.addresses, vantage, provisioningAddress), port: entry.port }));
    const results = await probeFrom(vantage.netns, targets, timeoutSeconds);
    measured.forEach((entry, i) => (entry.row[network] = results[i]!.open ? "yes" : "no"));
  }
  return [...rows.values()].map((entry) => entry.row).sort(compareRows);
}

export function compareRows(a: ExposureRow, b: ExposureRow): number {
  return `${a.port} ${a.addresses}`.localeCompare(`${b.port} ${b.addresses}`, "en", { numeric: true });
}

export const EXPOSURE_PAGE = "docs/network-exposure.md";

/** The table of docs/network-exposure.md: its rows that apply to an appliance with these parts. */
export async function readmeExposure(parts: { kubernetes: boolean; provisioningNetwork: boolean }): Promise<ExposureRow[]> {
  const page = await readFile(join(REPO, EXPOSURE_PAGE), "utf8");
  const table = page.slice(page.indexOf("| port |"));
  const rows: ExposureRow[] = [];
  for (const line of table.split("\n").slice(2)) {
    if (!line.startsWith("|")) break;
    const [port = "", addresses = "", site = "", provisioning = "", applies = ""] = line
      .split("|")
      .slice(1)
      .map((c) => c.trim().replace(/`/g, ""));
    const wanted: Record<Applies, boolean> = {
      always: true,
      Kubernetes: parts.kubernetes,
      "provisioning network": parts.kubernetes && parts.provisioningNetwork,
    };
    if (!(applies in wanted)) throw new Error(`${EXPOSURE_PAGE}: row ${port} says "${applies}" where always, Kubernetes or provisioning network belongs`);
    if (wanted[applies as Applies])
      rows.push({ port, addresses: addresses as AddressClass, site: site as "yes" | "no", provisioning: provisioning as "yes" | "no" });
  }
  return rows.sort(compareRows);
}
