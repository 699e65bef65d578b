/**
 * The appliance's network exposure as the booted appliance shows it: every listener (`ss`)
 * and, from its firewall (`nft -j list table inet icn_bootstrap`), whether the site network
 * and the provisioning network may open a connection to it. Compared with the table of
 * docs/network-exposure.md, which is therefore never kept by hand alone.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
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

export interface FirewallPorts {
  /** "6385/tcp": dropped from every interface but lo, cni0 and the provisioning network's. */
  siteBlocked: Set<string>;
  /** "5000/tcp": what the provisioning network may open on the appliance. */
  fromNodes: Set<string>;
  /** The bootstrap cluster's addresses (icn0's included) are guarded from the networks. */
  guardsClusterAddresses: boolean;
}

type NftRule = { chain: string; expr: Record<string, unknown>[] };

/** Ports named by a rule's `tcp dport`/`udp dport` match, as "PORT/PROTO". */
function rulePorts(rule: NftRule): string[] {
  const ports: string[] = [];
  for (const expr of rule.expr) {
    const match = expr.match as { left?: { payload?: { protocol?: string; field?: string } }; right?: unknown } | undefined;
    const payload = match?.left?.payload;
    if (!payload || payload.field !== "dport") continue;
    const right = match!.right as number | { set: number[] };
    for (const port of typeof right === "number" ? [right] : right.set) ports.push(`${port}/${payload.protocol}`);
  }
  return ports;
}

const verdict = (rule: NftRule) => rule.expr.find((e) => "accept" in e || "drop" in e);

/** The ports the shipped firewall opens to the nodes and closes to the site, from `nft -j list table inet icn_bootstrap`. */
export function parseFirewall(nftJson: string): FirewallPorts {
  const items = (JSON.parse(nftJson) as { nftables: Record<string, unknown>[] }).nftables;
  const rules = items.filter((i) => "rule" in i).map((i) => i.rule as NftRule);
  const siteBlocked = new Set(rules.filter((r) => r.chain === "input" && verdict(r) && "drop" in verdict(r)!).flatMap(rulePorts));
  const fromNodes = new Set(rules.filter((r) => r.chain === "from_nodes" && verdict(r) && "accept" in verdict(r)!).flatMap(rulePorts));
  const guardsClusterAddresses = items.some((i) => "chain" in i && (i.chain as { name: string }).name === "guard_cluster_addresses");
  return { siteBlocked, fromNodes, guardsClusterAddresses };
}

function addressClass(address: string, provisioningAddress: string | undefined): AddressClass | string {
  // ss writes "[::1]", "127.0.0.53%lo", "[fe80::1]%eth0", "*".
  const [ip = "", device] = address.split("%");
  const bare = ip.replace(/^\[|\]$/g, "");
  if (device === "lo" || bare.startsWith("127.") || bare === "::1") return "loopback";
  if (device && device !== "lo") return device === "icn0" ? "icn0" : "provisioning interface";
  if (bare === "0.0.0.0" || bare === "::" || bare === "*") return "all";
  if (bare === "10.254.254.254") return "icn0";
  if (provisioningAddress && bare === provisioningAddress) return "provisioning interface";
  return bare;
}

/** The exposure table the appliance's listeners and firewall make, one row per port and address class, sorted. */
export function exposureRows(listeners: Listener[], firewall: FirewallPorts, provisioningAddress?: string): ExposureRow[] {
  const rows = new Map<string, ExposureRow>();
  for (const listener of listeners) {
    // The DHCP client's socket (systemd-networkd) answers only its own exchanges.
    if (listener.proto === "udp" && listener.port === "68") continue;
    const addresses = addressClass(listener.address, provisioningAddress) as AddressClass;
    const ephemeral = listener.program === "containerd" && addresses === "loopback" && Number(listener.port) > 32767;
    const port = `${ephemeral ? "random" : listener.port}/${listener.proto}`;
    const open = (network: "site" | "provisioning"): "yes" | "no" => {
      if (addresses === "loopback") return "no";
      if (addresses === "icn0") return firewall.guardsClusterAddresses ? "no" : network === "site" ? "yes" : "no";
      if (addresses === "provisioning interface") return network === "site" ? "no" : firewall.fromNodes.has(port) ? "yes" : "no";
      if (network === "site") return firewall.siteBlocked.has(port) ? "no" : "yes";
      return firewall.fromNodes.has(port) ? "yes" : "no";
    };
    rows.set(`${port} ${addresses}`, { port, addresses, site: open("site"), provisioning: open("provisioning") });
  }
  return [...rows.values()].sort(compareRows);
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

/** The commands whose output exposureRows reads, as one shell line for SSH. */
export const EXPOSURE_COMMAND = "ss -Htlnup; echo '---'; nft -j list table inet icn_bootstrap";

export function exposureFromOutput(output: string, provisioningAddress?: string): ExposureRow[] {
  const [ss = "", nft = ""] = output.split("\n---\n");
  return exposureRows(parseListeners(ss), parseFirewall(nft), provisioningAddress);
}
