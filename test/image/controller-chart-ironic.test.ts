/**
 * Ironic in the infra-local-controller chart (images/infra-local-controller-chart,
 * manifests/metal3/ironic.yaml): on the host's network without the appliance's firewall in
 * front, its API (6385) and boot-file server (6180) listen on one address only — the
 * provisioning address, or the node's own without a provisioning network — and the
 * baremetal-operator reaches it there. The appliance (metal3.ironicListenAll) keeps every
 * address. The boot-file server's start, as the chart renders it, is run for real (the
 * host's nginx with the image's httpd.conf, in a network namespace of its own).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO } from "../helpers/cli.js";
import { writeControllerChart, type ControllerChart } from "../helpers/controller-chart.js";

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef: { fieldPath: string } };
}
interface Probe {
  httpGet?: { host?: string };
  tcpSocket?: { host?: string };
}
interface Container {
  name: string;
  command?: string[];
  env?: EnvVar[];
  startupProbe?: Probe;
  livenessProbe?: Probe;
  readinessProbe?: Probe;
}
interface K8sObject {
  kind: string;
  metadata: { name: string };
  data?: Record<string, string>;
  spec?: { template: { spec: { containers: Container[]; affinity?: unknown } } };
}

let dir: string;
let chart: ControllerChart;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "icn-chart-ironic-"));
  chart = await writeControllerChart(dir);
}, 20 * 60_000);
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function render(values: string, ...set: string[]) {
  const result = await chart.helm(["template", "icn", chart.dir, "-f", join(chart.dir, values), ...set.flatMap((s) => ["--set", s])]);
  expect(result.exitCode, String(result.stderr)).toBe(0);
  const objects = (yaml.loadAll(String(result.stdout)) as (K8sObject | null)[]).filter((o): o is K8sObject => Boolean(o));
  const get = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name)!;
  const ironic = get("Deployment", "ironic").spec!.template.spec;
  const container = (name: string) => ironic.containers.find((c) => c.name === name)!;
  return {
    api: container("ironic"),
    httpd: container("httpd"),
    bmo: get("Deployment", "baremetal-operator").spec!.template.spec,
    endpoint: get("ConfigMap", "baremetal-operator-ironic").data!.IRONIC_ENDPOINT,
  };
}

const env = (c: Container, name: string) => c.env?.find((e) => e.name === name);

describe("Ironic in the chart", () => {
  it("with a provisioning network: API and boot-file server on the provisioning address only, reached there", async () => {
    const r = await render("ci/cluster-values.yaml"); // provisioning.address 172.22.0.1
    for (const c of [r.api, r.httpd]) expect(env(c, "IRONIC_LISTEN_IP"), c.name).toEqual({ name: "IRONIC_LISTEN_IP", value: "172.22.0.1" });
    expect(env(r.api, "IRONIC_IP")).toEqual({ name: "IRONIC_IP", value: "172.22.0.1" });
    // The kubelet's probes go where it listens (by default they would go to the pod's, the node's, address).
    for (const probe of [r.api.startupProbe, r.api.livenessProbe, r.api.readinessProbe]) expect(probe!.httpGet!.host).toBe("172.22.0.1");
    expect(r.httpd.readinessProbe!.tcpSocket!.host).toBe("172.22.0.1");
    // The Service's endpoint (the node's address) no longer answers: the baremetal-operator goes to the address, from Ironic's node.
    expect(r.endpoint).toBe("http://172.22.0.1:6385/v1/");
    expect(r.bmo.affinity).toEqual({
      podAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: [
          { labelSelector: { matchLabels: { "app.kubernetes.io/name": "ironic" } }, topologyKey: "kubernetes.io/hostname" },
        ],
      },
    });
  });

  it("a provisioning address with its prefix length is bound without it", async () => {
    const r = await render("ci/cluster-values.yaml", "provisioning.address=172.22.0.1/24");
    expect(env(r.httpd, "IRONIC_LISTEN_IP")!.value).toBe("172.22.0.1");
    expect(r.endpoint).toBe("http://172.22.0.1:6385/v1/");
  });

  it("without a provisioning network: on the node's own address (where the Service reaches it), not on every address", async () => {
    const r = await render("ci/serve-values.yaml");
    const hostIP = { fieldRef: { fieldPath: "status.hostIP" } };
    for (const c of [r.api, r.httpd]) expect(env(c, "IRONIC_LISTEN_IP"), c.name).toEqual({ name: "IRONIC_LISTEN_IP", valueFrom: hostIP });
    expect(env(r.api, "IRONIC_IP")).toEqual({ name: "IRONIC_IP", valueFrom: hostIP });
    expect(r.api.readinessProbe!.httpGet!.host).toBeUndefined();
    expect(r.endpoint).toBe("http://ironic.baremetal-operator-system.svc:6385/v1/");
    expect(r.bmo.affinity).toBeUndefined();
  });

  it("the appliance's values (its firewall in front) keep every address", async () => {
    const r = await render("ci/appliance-values.yaml");
    for (const c of [r.api, r.httpd]) expect(env(c, "IRONIC_LISTEN_IP"), c.name).toBeUndefined();
    expect(r.endpoint).toBe("http://ironic.baremetal-operator-system.svc:6385/v1/");
  });

  /** The rendered httpd start in a network namespace of its own: what nginx listens on. */
  async function listeners(command: string[], listenIp: string | undefined): Promise<string[]> {
    const script = [
      `${listenIp ? `IRONIC_LISTEN_IP=${listenIp} ` : ""}"$@" >/tmp/httpd.log 2>&1 &`, // a file: node's pipes are sockets, which nginx cannot open as /dev/stdout
      "for i in $(seq 100); do ss -Hltn | grep -q ':6180 ' && break; sleep 0.05; done",
      "ss -Hltn | awk '{print $4}'",
      "kill $!",
      "cat /tmp/httpd.log >&2",
    ].join("\n");
    const result = await execa(
      "bwrap",
      [
        ...["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-net", "--die-with-parent"],
        // The image's httpd.conf where the image has it is the repository's (the host has no /etc/ironic).
        ...["/bin/sh", "-c", script, "sh", ...command.map((arg) => arg.replaceAll("/etc/ironic/httpd.conf", join(REPO, "images/ironic/httpd.conf")))],
      ],
      { reject: false, all: true, timeout: 20_000 },
    );
    expect(result.exitCode, result.all).toBe(0);
    return result.stdout
      .split("\n")
      .filter((l) => l.endsWith(":6180"))
      .sort();
  }

  it("the boot-file server, started as rendered, listens on the one address, or on every address for the appliance", async () => {
    const bound = await render("ci/cluster-values.yaml", "provisioning.address=127.0.0.2");
    expect(await listeners(bound.httpd.command!, env(bound.httpd, "IRONIC_LISTEN_IP")!.value)).toEqual(["127.0.0.2:6180"]);
    const appliance = await render("ci/appliance-values.yaml");
    expect(await listeners(appliance.httpd.command!, undefined)).toEqual(["0.0.0.0:6180", "[::]:6180"]);
  });
});
