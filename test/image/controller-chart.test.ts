/**
 * The infra-local-controller chart (images/infra-local-controller-chart): made from the
 * appliance's own manifests by the build's chart recipe, checked by the pinned Helm.
 * With the appliance's values it renders exactly the objects the appliance applies (one
 * source, nothing that drifts); with a cluster's own values it carries them where they
 * belong, makes its credentials and CA at install, and refuses values it cannot use,
 * naming them.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readMetal3Manifests } from "../../builder/metal3/manifests.js";
import { REPO } from "../helpers/cli.js";
import { writeControllerChart, type ControllerChart } from "../helpers/controller-chart.js";

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; annotations?: Record<string, string> };
  [key: string]: unknown;
}

let dir: string;
let chart: string;
let helm: ControllerChart["helm"];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "icn-controller-chart-"));
  ({ dir: chart, helm } = await writeControllerChart(dir));
}, 20 * 60_000);
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function template(args: string[]) {
  const result = await helm(["template", "icn", chart, ...args]);
  return { exitCode: result.exitCode, stdout: String(result.stdout), stderr: String(result.stderr) };
}

async function render(args: string[]): Promise<K8sObject[]> {
  const result = await template(args);
  expect(result.exitCode, result.stderr).toBe(0);
  return (yaml.loadAll(result.stdout) as (K8sObject | null)[]).filter((o): o is K8sObject => Boolean(o));
}

const key = (o: K8sObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;
const find = (objects: K8sObject[], kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Pod = { spec: { template: { metadata: { annotations?: Record<string, string> }; spec: any } } };

/** What the appliance applies from manifests/ (without the provisioning network's DHCP server) and the build's Metal3 stage. */
async function applianceObjects(): Promise<K8sObject[]> {
  const objects: K8sObject[] = [];
  for (const sub of ["bpa", "crds", "metal3"]) {
    for (const file of (await readdir(join(REPO, "manifests", sub))).filter((f) => f.endsWith(".yaml")))
      objects.push(...(yaml.loadAll(await readFile(join(REPO, "manifests", sub, file), "utf8")) as K8sObject[]).filter(Boolean));
  }
  const metal3 = await readMetal3Manifests();
  for (const text of [...Object.values(metal3.crds), metal3.clusterRole]) objects.push(...(yaml.loadAll(text) as K8sObject[]).filter(Boolean));
  return objects;
}

describe("the infra-local-controller chart", () => {
  it("passes helm lint with each of its ci/ value sets", async () => {
    for (const values of ["ci/appliance-values.yaml", "ci/cluster-values.yaml", "ci/serve-values.yaml"]) {
      const lint = await helm(["lint", chart, "--strict", "-f", join(chart, values)]);
      expect(lint.exitCode, `${values}\n${lint.stdout}\n${lint.stderr}`).toBe(0);
    }
  });

  it("with the appliance's values renders exactly the objects the appliance applies from manifests/ and Metal3's module", async () => {
    const rendered = await render(["-f", join(chart, "ci/appliance-values.yaml")]);
    const expected = await applianceObjects();
    const byKey = new Map(rendered.map((o) => [key(o), o]));
    for (const object of expected) {
      const got = structuredClone(byKey.get(key(object)));
      expect(got, `${key(object)} is not in the chart`).toBeDefined();
      // The one difference: CRDs and namespaces stay when the release is uninstalled.
      if (["CustomResourceDefinition", "Namespace"].includes(object.kind)) {
        expect(got!.metadata.annotations?.["helm.sh/resource-policy"]).toBe("keep");
        delete got!.metadata.annotations!["helm.sh/resource-policy"];
        if (Object.keys(got!.metadata.annotations!).length === 0) delete got!.metadata.annotations;
      }
      expect(got, key(object)).toEqual(object);
      byKey.delete(key(object));
    }
    // Beside them only the provisioning network's ConfigMap, which the appliance writes from site.yaml.
    expect([...byKey.keys()]).toEqual(["ConfigMap/baremetal-operator-system/ironic-provisioning"]);
  });

  it("with a cluster's own values: its registry, addresses, storage class and provisioning network where they belong", async () => {
    const values = yaml.load(await readFile(join(chart, "ci/cluster-values.yaml"), "utf8")) as {
      registry: { address: string };
      images: { registry: string };
      provisioning: { interface: string; address: string; dhcpRange: string };
    };
    const objects = await render(["-f", join(chart, "ci/cluster-values.yaml")]);
    const deployments = objects.filter((o) => o.kind === "Deployment") as unknown as (K8sObject & Pod)[];
    expect(deployments.map((d) => d.metadata.name).sort()).toEqual(["baremetal-operator", "bpa-api", "bpa-operator", "ironic", "ironic-dnsmasq"]);
    for (const d of deployments)
      for (const c of d.spec.template.spec.containers)
        expect(c.image, `${d.metadata.name}/${c.name}`).toMatch(/^registry\.example\.test:5000\/(icn|metal3-io)\//);
    const config = yaml.load((find(objects, "ConfigMap", "bpa-config") as unknown as { data: Record<string, string> }).data["config.yaml"]!) as Record<
      string,
      string
    >;
    expect(config.runnerImage).toBe("registry.example.test:5000/icn/kubespray-runner:latest");
    expect(config.registryHost).toBe("192.0.2.10:5000");
    expect(config.filesRepo).toBe("http://192.0.2.10:8080/kubespray");
    const api = find(deployments, "Deployment", "bpa-api") as unknown as Pod;
    expect(api.spec.template.spec.hostAliases).toEqual([{ ip: values.registry.address, hostnames: ["bootstrap.icn"] }]);
    const operator = find(deployments, "Deployment", "bpa-operator") as unknown as Pod;
    expect(operator.spec.template.spec.containers[0].env).toContainEqual({ name: "BPA_ADDONS_REGISTRY_IP", value: values.registry.address });
    // No API server address given: the baremetal-operator uses the kubernetes Service.
    const bmoEnv = (find(deployments, "Deployment", "baremetal-operator") as unknown as Pod).spec.template.spec.containers[0].env as { name: string }[];
    expect(bmoEnv.map((e) => e.name)).toEqual(["POD_NAME", "POD_NAMESPACE"]);
    // The upload store on the storage class: no hostPath volume.
    expect(find(objects, "PersistentVolume", "bpa-api-state")).toBeUndefined();
    expect((find(objects, "PersistentVolumeClaim", "bpa-api-state") as unknown as { spec: unknown }).spec).toEqual({
      accessModes: ["ReadWriteOnce"],
      storageClassName: "standard",
      resources: { requests: { storage: "20Gi" } },
    });
    // The provisioning network: DHCP there, and its digest (as the appliance's first boot computes it) restarts Ironic's pods.
    const p = values.provisioning;
    expect((find(objects, "ConfigMap", "ironic-provisioning") as unknown as { data: unknown }).data).toEqual({
      PROVISIONING_INTERFACE: p.interface,
      PROVISIONING_ADDRESS: p.address,
      DHCP_RANGE: p.dhcpRange,
    });
    const digest = createHash("sha256").update(`${p.interface} ${p.address} ${p.dhcpRange}`).digest("hex").slice(0, 16);
    for (const name of ["ironic", "ironic-dnsmasq"])
      expect((find(deployments, "Deployment", name) as unknown as Pod).spec.template.metadata.annotations).toEqual({
        "icn.akraino.org/provisioning-network": digest,
      });
    expect((find(objects, "ConfigMap", "baremetal-operator-ironic") as unknown as { data: Record<string, string> }).data.DEPLOY_RAMDISK_URL).toBe(
      "http://192.0.2.10:8080/boot/ironic-python-agent.initramfs",
    );
  });

  it("renders no Secret, key, certificate or password with any of its value sets, and holds none (deploy or the appliance makes them beside the release)", async () => {
    for (const values of ["ci/appliance-values.yaml", "ci/cluster-values.yaml", "ci/serve-values.yaml"]) {
      const result = await template(["-f", join(chart, values)]);
      expect(result.exitCode, result.stderr).toBe(0);
      expect(result.stdout, values).not.toMatch(/^kind: Secret$/m);
      expect(result.stdout, values).not.toMatch(/BEGIN [A-Z ]*(PRIVATE KEY|CERTIFICATE)/);
    }
    for (const file of (await readdir(chart, { recursive: true, withFileTypes: true })).filter((f) => f.isFile())) {
      const text = await readFile(join(file.parentPath, file.name), "utf8");
      expect(text, file.name).not.toMatch(/BEGIN [A-Z ]*(PRIVATE KEY|CERTIFICATE)|password: ["']?[A-Za-z0-9+/=]{8,}/);
      // Helm's generators and lookups are where a chart makes or copies keys into its release.
      if (relative(chart, file.parentPath).startsWith("templates"))
        expect(text, file.name).not.toMatch(/\b(genCA|genSignedCert|genPrivateKey|htpasswd|lookup)\b/);
    }
  });

  it("with serve: the site's registry and file server in pods, on their NodePorts, with the rules for every tag and repository the bundle ships", async () => {
    const objects = await render(["-f", join(chart, "ci/serve-values.yaml")]);
    const deployment = (name: string) => find(objects, "Deployment", name) as unknown as K8sObject & Pod;
    const registry = deployment("icn-registry").spec.template.spec;
    const files = deployment("icn-files").spec.template.spec;
    // Debian's docker-registry behind nginx in one pod, the file server's nginx in another, from the images registry given.
    expect(registry.containers.map((c: { name: string }) => c.name)).toEqual(["registry", "front"]);
    for (const c of [...registry.containers, ...files.containers]) expect(c.image).toBe("registry.example.test:5000/icn/site-services:latest");
    // On a NodePort each, as the REST API: no hostPort, which the namespace's restricted Pod Security refuses.
    expect(registry.containers[1].ports).toEqual([{ name: "registry", containerPort: 5000, protocol: "TCP" }]);
    expect(files.containers[0].ports).toEqual([{ name: "files", containerPort: 8080, protocol: "TCP" }]);
    const service = (name: string) => (find(objects, "Service", name) as unknown as { spec: { type: string; ports: unknown[] } }).spec;
    expect(service("icn-registry")).toMatchObject({ type: "NodePort", ports: [{ port: 5000, targetPort: "registry", nodePort: 30444 }] });
    expect(service("icn-files")).toMatchObject({ type: "NodePort", ports: [{ port: 8080, targetPort: "files", nodePort: 30081 }] });
    const namespace = find(objects, "Namespace", "bpa-system") as unknown as { metadata: { labels: Record<string, string> } };
    expect(namespace.metadata.labels["pod-security.kubernetes.io/enforce"]).toBe("restricted");
    for (const pod of [registry, files]) {
      expect(pod.securityContext).toMatchObject({ runAsUser: 65532, runAsNonRoot: true });
      expect(pod.automountServiceAccountToken).toBe(false);
    }
    // The file server serves what the REST API published: its store, read-only, on the same node.
    expect(files.volumes).toContainEqual({ name: "published", persistentVolumeClaim: { claimName: "bpa-api-state", readOnly: true } });
    expect(files.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector).toEqual({
      matchLabels: { "app.kubernetes.io/name": "bpa-api" },
    });
    // Storage: the registry on the storage class, the files on a hostPath volume.
    expect(find(objects, "PersistentVolume", "icn-registry-data")).toBeUndefined();
    expect((find(objects, "PersistentVolumeClaim", "icn-registry-data") as unknown as { spec: unknown }).spec).toMatchObject({ storageClassName: "standard" });
    expect((find(objects, "PersistentVolume", "icn-files-data") as unknown as { spec: { hostPath: unknown } }).spec.hostPath).toEqual({
      path: "/var/lib/icn-bootstrap/files",
      type: "Directory",
    });
    // The BPA hands the clusters it installs the chart's registry and file server, on their ports.
    const config = yaml.load((find(objects, "ConfigMap", "bpa-config") as unknown as { data: Record<string, string> }).data["config.yaml"]!) as Record<
      string,
      string
    >;
    expect(config.registryHost).toBe("192.0.2.10:30444");
    expect(config.filesRepo).toBe("http://192.0.2.10:30081/kubespray");
    expect(config.runnerImage).toBe("registry.example.test:5000/icn/kubespray-runner:latest");
    // Its certificate and password file: the Secret deploy makes (icn-registry-front), mounted.
    expect(registry.volumes.find((v: { name: string }) => v.name === "front").secret.secretName).toBe("icn-registry-front");
    // The nginx configurations are the chart's files, mounted whole, with the rules for every tag and repository the bundle ships.
    const registryConfig = (find(objects, "ConfigMap", "icn-registry") as unknown as { data: Record<string, string> }).data;
    expect(Object.keys(registryConfig).sort()).toEqual(["config.yml", "nginx.conf", "shipped.conf"]);
    expect(registryConfig["nginx.conf"]).toContain("auth_basic_user_file /etc/icn/front/htpasswd;");
    expect(registryConfig["nginx.conf"]).toContain("include /etc/icn/nginx/shipped.conf;");
    expect(registryConfig["shipped.conf"]).toContain(`"PUT /v2/icn/bpa/manifests/latest" "icn/bpa:latest is shipped with the chart's bundle";`);
    expect(registryConfig["shipped.conf"]).toContain(`"PUT /v2/charts/infra-local-controller/manifests/0.1.0"`);
    expect(registryConfig["shipped.conf"]).toContain(`"~^/v2/kube-apiserver/(manifests|blobs|tags|referrers)/" "kube-apiserver";`);
    expect(registry.containers[1].volumeMounts).toContainEqual({
      name: "configuration",
      mountPath: "/etc/icn/nginx/shipped.conf",
      subPath: "shipped.conf",
      readOnly: true,
    });
    // Without serve (every other value set), none of it.
    const plain = await render(["-f", join(chart, "ci/cluster-values.yaml")]);
    expect(plain.filter((o) => /^icn-(registry|files)(-data|-front)?$/.test(o.metadata.name)).map(key)).toEqual([]);
  });

  it("refuses values it cannot use, naming them", async () => {
    const missing = await template([]);
    expect(missing.exitCode).not.toBe(0);
    expect(missing.stderr).toContain("registry.address");
    const base = ["--set", "registry.address=192.0.2.10", "--set", "nodeFacingAddress=192.0.2.10"];
    const half = await template([...base, "--set", "provisioning.interface=eth1"]);
    expect(half.exitCode).not.toBe(0);
    expect(half.stderr).toContain("provisioning.address");
    const port = await template([...base, "--set", "api.nodePort=443"]);
    expect(port.exitCode).not.toBe(0);
    expect(port.stderr).toContain("nodePort");
    const samePort = await template([...base, "--set", "serve.files.enabled=true", "--set", "serve.files.port=30443"]);
    expect(samePort.exitCode).not.toBe(0);
    expect(samePort.stderr).toContain("serve.files.port 30443 is taken by another of the chart's NodePorts");
    const lowPort = await template([...base, "--set", "serve.registry.enabled=true", "--set", "serve.registry.port=5000"]);
    expect(lowPort.exitCode).not.toBe(0);
    expect(lowPort.stderr).toMatch(/serve.registry.port'?: minimum/);
    const nodeport = await template([...base, "--set", "api.nodeport=30443"]);
    expect(nodeport.exitCode).not.toBe(0);
    expect(nodeport.stderr).toContain("nodeport");
    const unknown = await template([...base, "--set", "registy.address=192.0.2.10"]);
    expect(unknown.exitCode).not.toBe(0);
    expect(unknown.stderr).toContain("registy");
  });
});
