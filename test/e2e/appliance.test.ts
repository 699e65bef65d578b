/**
 * The whole product, in QEMU: the default definition's appliance boots with no user
 * action and with no way out of the VM (QEMU user networking with restrict=on) into a
 * single-node Kubernetes running the BPA; then the seed's sample Provisioning and a set
 * of BareMetalHosts, applied through the VM's API server, make the BPA write the
 * inventory and create the install Job. A second boot does not initialise the cluster
 * again, and a power cut during kubeadm init is recovered at the next boot. A developer's
 * uploads through the BPA's REST API (a file, an OS image, a container image, with
 * `icn-bootstrap upload` from the host) are served where the compute nodes take them,
 * and still are after the reboot. A site disk (`icn-bootstrap site write --new`) brings a
 * namespace, a BMC Secret, a BareMetalHost and a Provisioning: applied once the BPA is
 * ready, the Secret's file deleted from the disk, nothing applied again at the next boot.
 * Metal3 runs from the seeded registry: that host, whose BMC address nothing answers,
 * ends in registration error with Ironic's reason. The site disk gives the appliance a site
 * network and a provisioning network (two NICs on taps in network namespaces): every
 * listener it shows is tried from a host on each, against docs/network-exposure.md's table.
 */
import { createHash, randomBytes, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Provisioning } from "../../bpa/api/types.js";
import type { UploadRecord } from "../../common/uploads.js";
import { TOKEN_AUDIENCE } from "../../bpa/rest/auth.js";
import { makeClients, type Clients } from "../../bpa/runtime/kube.js";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { freePort } from "../../builder/registry/server.js";
import { bmh } from "../helpers/fixtures/bpa/hosts.js";
import { createHost, createProvisioning, waitFor } from "../helpers/operator-suite.js";
import { ApiClient } from "../helpers/rest-suite.js";
import { REPO, runCli } from "../helpers/cli.js";
import { fileHolds } from "../helpers/disk-search.js";
import { printFailedUnitJournal, sshToVm } from "../helpers/ssh.js";
import { dockerSaveArchive } from "../helpers/docker-save.js";
import { writeDefinition } from "../helpers/definition.js";
import { LISTENERS_COMMAND, measureExposure, measuringNetworks, parseListeners, readmeExposure } from "../helpers/exposure.js";

const BOOT_TIMEOUT_S = 60 * 60; // kubeadm init under TCG takes many minutes
const READY = /ICN-BOOTSTRAP-READY host=(\S+) .* kubernetes=(v[\d.]+) bpa=available metal3=available/;
const SEEDED = yaml.load(readFileSync(join(REPO, "registry-seed/bootstrap.yaml"), "utf8")) as { images: { ref: string; digest?: string }[] };
const pinned = (ref: string) => SEEDED.images.find((i) => i.ref === ref)!.digest!;

let work: string;
let image: string;
let key: string;
let siteDisk: string;
const networks = measuringNetworks();

const SITE_OBJECTS: Record<string, string> = {
  "00-namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: site-a\n",
  // The BPA operator's rights in the site's namespace (bpa/README.md, "Permissions"), as a site binds them.
  "05-bpa-operator.yaml":
    "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: bpa-operator\n  namespace: site-a\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: bpa-operator-namespace\nsubjects:\n  - kind: ServiceAccount\n    name: bpa-operator\n    namespace: bpa-system\n",
  "10-bmc-secret.yaml":
    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: node-1-bmc\n  namespace: site-a\nstringData:\n  username: admin\n  password: site-a-bmc-password\n",
  "20-hosts.yaml":
    "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: node-1\n  namespace: site-a\nspec:\n  online: true\n  bootMACAddress: 52:54:00:00:00:01\n  bmc:\n    address: redfish+http://192.168.111.1:8000/redfish/v1/Systems/node-1\n    credentialsName: node-1-bmc\n",
  "30-provisioning.yaml":
    "apiVersion: bpa.akraino.org/v1alpha1\nkind: Provisioning\nmetadata:\n  name: site-a-cluster\n  namespace: site-a\nspec:\n  master:\n    cpu: 2\n    memory: 2Gi\n",
};
const consoleLines: string[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-appliance-"));
  key = join(work, "id_ed25519");
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
  // The default definition plus an SSH key for the test (an overlay-only change).
  const publicKey = (await readFile(`${key}.pub`, "utf8")).trim();
  const definition = await writeDefinition((d) => {
    d.kubernetes = { ...d.kubernetes, enabled: true };
    d.access = { sshAuthorizedKeys: [publicKey] };
  });
  const build = await runCli(["build", "--definition", definition, "--format", "qcow2", "--out", join(work, "out")]);
  expect(build.exitCode, build.all).toBe(0);
  image = join(work, "out", "icn-bootstrap.qcow2");
  const site = join(work, "site");
  await mkdir(join(site, "manifests"), { recursive: true });
  await writeFile(join(site, "site.yaml"), `version: 1\n${networks.siteYaml}`);
  for (const [name, text] of Object.entries(SITE_OBJECTS)) await writeFile(join(site, "manifests", name), text);
  siteDisk = join(work, "site.img");
  const written = await runCli(["site", "write", site, "--new", siteDisk]);
  expect(written.exitCode, written.all).toBe(0);
}, 90 * 60_000);

const ssh = (port: number, command: string) => sshToVm(key, port, command);
/** The etcd cluster's and member's ids (etcd's JSON gateway, with the API server's client certificate). */
const etcdMember = async (port: number) => {
  const pki = "/etc/kubernetes/pki";
  const { stdout } = await ssh(
    port,
    `curl -sf -X POST -d '{}' --cacert ${pki}/etcd/ca.crt --cert ${pki}/apiserver-etcd-client.crt --key ${pki}/apiserver-etcd-client.key https://127.0.0.1:2379/v3/cluster/member/list`,
  );
  const list = JSON.parse(stdout) as { header: { cluster_id: string; member_id: string }; members: unknown[] };
  expect(list.members).toHaveLength(1);
  return `cluster ${list.header.cluster_id} member ${list.header.member_id}`;
};

describe("the appliance", () => {
  let vm: BootResult | undefined;
  afterAll(async () => {
    await vm?.stop?.();
    await networks.remove();
  });

  it("boots into Kubernetes with the BPA available, then provisions from the seed's sample", { timeout: (BOOT_TIMEOUT_S + 900) * 1000 }, async () => {
    const sshPort = await freePort();
    const apiPort = await freePort();
    const restPort = await freePort();
    const disk = join(work, "disk.qcow2");
    // Both boots: the same disk, SSH, the API server and the REST API forwarded; a whole
    // control plane under emulation needs both host cores.
    const boot = (timeoutSeconds: number) =>
      networks.during(
        bootImage({
          image,
          firmware: "bios",
          timeoutSeconds,
          memoryMiB: 4096,
          disk,
          // Room for the system slots and a data partition (the default qcow2's own size).
          diskSize: "32G",
          keepRunning: true,
          tcgMultiThread: true,
          hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`, `tcp:127.0.0.1:${apiPort}-:6443`, `tcp:127.0.0.1:${restPort}-:30443`],
          onLine: (line) => consoleLines.push(line),
          // A failed first-boot step: its journal, read while the VM still runs.
          beforeStopOnFailure: printFailedUnitJournal(key, sshPort),
          extraDisks: [siteDisk],
          extraTaps: networks.taps,
        }),
      );
    vm = await boot(BOOT_TIMEOUT_S + 600);
    expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
    const [, , version] = READY.exec(vm.readyLine!) ?? [];
    expect(version).toMatch(/^v1\./);
    const steps = consoleLines.filter((l) => l.includes("ICN-BOOTSTRAP-STEP"));
    console.log(`appliance ready after ${vm.seconds.toFixed(0)}s (${vm.accel}); first-boot steps:\n  ${steps.join("\n  ")}`);

    // The admin kubeconfig, pointed at the forwarded API port (127.0.0.1 is in the serving certificate).
    const admin = (await ssh(sshPort, "cat /etc/kubernetes/admin.conf")).stdout.replace(/server: https:\/\/[^\s]+/, `server: https://127.0.0.1:${apiPort}`);
    const kc = new KubeConfig();
    kc.loadFromString(admin);
    const c: Clients = makeClients(kc);
    const nodes = await c.core.listNode();
    expect(nodes.items).toHaveLength(1);
    expect(nodes.items[0]!.status?.conditions?.find((x) => x.type === "Ready")?.status).toBe("True");

    // The registry's push credentials and CA, made on this machine, for the admin and the BPA.
    const push = await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "icn-registry-push" });
    expect(push.type).toBe("kubernetes.io/basic-auth");
    expect(Buffer.from(push.data!.username!, "base64").toString()).toBe("icn-push");
    expect(Buffer.from(push.data!.password!, "base64").toString()).toBe(
      (await ssh(sshPort, "cat /etc/icn-bootstrap/pki/registry-push.password")).stdout.trim(),
    );
    const ca = await c.core.readNamespacedConfigMap({ namespace: "bpa-system", name: "icn-registry-ca" });
    const caFingerprint = new X509Certificate(ca.data!["ca.crt"]!).fingerprint256.replace(/:/g, "").toLowerCase();
    expect(vm.readyLine).toContain(`registry_ca=sha256:${caFingerprint}`);
    // kubeadm's images came through nginx's front of the registry (its read-only loopback door), not around it.
    expect(Number((await ssh(sshPort, "grep -c 'GET /v2/kube-apiserver/manifests/' /var/log/nginx/access.log")).stdout.trim())).toBeGreaterThan(0);
    const listeners = (await ssh(sshPort, "ss -Htlnup | awk '{print $1, $5, $7}'")).stdout.trim();
    console.log(`listeners of the booted appliance:\n  ${listeners.split("\n").join("\n  ")}`);
    expect(listeners).not.toMatch(/:80 /);
    // docs/network-exposure.md is what this appliance shows, measured from its site network and its provisioning network.
    const shown = await measureExposure(parseListeners((await ssh(sshPort, LISTENERS_COMMAND)).stdout), networks, networks.provisioningAddress, 5);
    expect(shown).toEqual(await readmeExposure({ kubernetes: true, provisioningNetwork: true }));

    // The site disk's objects, applied once the BPA was available; the Secret's file is gone from the disk.
    const siteLines = consoleLines.filter((l) => l.includes("ICN-SITE"));
    console.log(`site objects at first boot:\n  ${siteLines.join("\n  ")}`);
    for (const file of Object.keys(SITE_OBJECTS)) expect(siteLines.join("\n")).toContain(`ICN-SITE: applied manifests/${file}`);
    expect(siteLines.join("\n")).toMatch(/ICN-SITE: removed manifests\/10-bmc-secret\.yaml from \/dev\/vdb/);
    const bmcSecret = await c.core.readNamespacedSecret({ namespace: "site-a", name: "node-1-bmc" });
    expect(Buffer.from(bmcSecret.data!.password!, "base64").toString()).toBe("site-a-bmc-password");
    const siteHost = await c.custom.getNamespacedCustomObject({
      group: "metal3.io",
      version: "v1alpha1",
      namespace: "site-a",
      plural: "baremetalhosts",
      name: "node-1",
    });
    expect((siteHost as { spec: { bmc: { credentialsName: string } } }).spec.bmc.credentialsName).toBe("node-1-bmc");
    // The BPA reconciles the site's Provisioning: its status says why it cannot go on (the host has no hardware details yet).
    const siteProvisioning = await waitFor(
      "the site's Provisioning reconciled by the BPA",
      async () => {
        const p = (await c.custom.getNamespacedCustomObject({
          group: "bpa.akraino.org",
          version: "v1alpha1",
          namespace: "site-a",
          plural: "provisionings",
          name: "site-a-cluster",
        })) as Provisioning;
        return (p.status?.conditions?.length ?? 0) > 0 ? p : undefined;
      },
      10 * 60_000,
      2000,
    );
    console.log(
      `site-a-cluster conditions: ${JSON.stringify(siteProvisioning.status?.conditions?.map((x) => `${x.type}=${x.status} ${x.reason}: ${x.message}`))}`,
    );

    // Metal3's baremetal-operator runs from the seeded registry and reconciles the site's host (its finalizer).
    const bmo = (await c.core.listNamespacedPod({ namespace: "baremetal-operator-system", labelSelector: "app.kubernetes.io/name=baremetal-operator" })).items;
    expect(bmo.map((p) => p.status?.phase)).toEqual(["Running"]);
    const bmoImage = bmo[0]!.status!.containerStatuses![0]!;
    expect(bmoImage.image).toBe("quay.io/metal3-io/baremetal-operator:v0.13.2");
    expect(bmoImage.imageID).toContain(pinned("quay.io/metal3-io/baremetal-operator:v0.13.2"));
    expect((await ssh(sshPort, "kubectl --kubeconfig /etc/kubernetes/admin.conf get bmh -A")).stdout).toMatch(/site-a\s+node-1/);
    await waitFor(
      "baremetal-operator's finalizer on the site's BareMetalHost",
      async () => {
        const host = (await c.custom.getNamespacedCustomObject({
          group: "metal3.io",
          version: "v1alpha1",
          namespace: "site-a",
          plural: "baremetalhosts",
          name: "node-1",
        })) as { metadata: { finalizers?: string[] } };
        return host.metadata.finalizers?.includes("baremetalhost.metal3.io") || undefined;
      },
      10 * 60_000,
      5000,
    );
    // Nothing answers at its BMC's address here: Metal3 ends it in registration error with Ironic's reason, offline.
    const unreachable = await waitFor(
      "registration error for the site's host (its BMC does not answer)",
      async () => {
        const host = (await c.custom.getNamespacedCustomObject({
          group: "metal3.io",
          version: "v1alpha1",
          namespace: "site-a",
          plural: "baremetalhosts",
          name: "node-1",
        })) as { status?: { errorType?: string; errorMessage?: string; operationalStatus?: string } };
        return host.status?.errorType === "registration error" ? host : undefined;
      },
      20 * 60_000,
      5000,
    );
    console.log(`node-1 (BMC 192.168.111.1:8000, nothing there): registration error: ${unreachable.status!.errorMessage}`);
    expect(unreachable.status!.operationalStatus).toBe("error");
    expect(unreachable.status!.errorMessage).toMatch(/192\.168\.111\.1|[Cc]onnection refused|[Uu]nable to connect|[Ff]ailed to connect|timed out/);

    // Hosts that fit the sample (master: 10 cpu / 4Gi, worker: 20 cpu / 8Gi), plus one too small. They
    // stand in for hosts Metal3 inspected: paused, so the real operator keeps their status as written.
    const namespace = "default";
    await createHost(c, namespace, bmh({ name: "node-a", cpu: 12, ram: 8192, ip: "192.168.50.11", paused: true }));
    await createHost(c, namespace, bmh({ name: "node-b", cpu: 24, ram: 16384, ip: "192.168.50.12", paused: true }));
    await createHost(c, namespace, bmh({ name: "node-c", cpu: 4, ram: 4096, ip: "192.168.50.13", paused: true }));
    const sample = yaml.load(await readFile(join(REPO, "bpa/samples/provisioning.yaml"), "utf8")) as Record<string, unknown>;
    await createProvisioning(c, namespace, sample);

    const created = Date.now();
    const provisioning = await waitFor(
      "the install Job in the Provisioning's status",
      async () => {
        const p = (await c.custom.getNamespacedCustomObject({
          group: "bpa.akraino.org",
          version: "v1alpha1",
          namespace,
          plural: "provisionings",
          name: "provisioning-sample",
        })) as Provisioning;
        return p.status?.installJob ? p : undefined;
      },
      10 * 60_000,
      2000,
    );
    console.log(`Provisioning -> Job in ${((Date.now() - created) / 1000).toFixed(1)}s inside the appliance`);
    const job = await c.batch.readNamespacedJob({ namespace, name: provisioning.status!.installJob! });
    expect(job.spec?.template.spec?.containers[0]?.image).toMatch(/kubespray-runner/);
    const inventory = await c.core.readNamespacedConfigMap({ namespace, name: provisioning.status!.inventoryConfigMap! });
    const hosts = inventory.data?.["hosts.ini"] ?? "";
    expect(hosts).toMatch(/\[kube_control_plane\]\s*\nnode-a/);
    expect(hosts).toMatch(/\[kube_node\]\s*\nnode-b/);
    expect(hosts).toMatch(/ansible_host=192\.168\.50\.11/);
    expect(hosts).not.toMatch(/node-c/);
    // The build's kubespray pins (applied at first boot) travel with the inventory.
    expect(inventory.data?.["kubespray-pins.yml"]).toMatch(/kubeadm_checksums:/);

    // The BPA's REST API runs beside the operator (it does not gate the ready marker).
    const api = await waitFor(
      "the bpa-api Deployment available",
      async () => {
        const d = await c.apps.readNamespacedDeployment({ namespace: "bpa-system", name: "bpa-api" });
        return (d.status?.availableReplicas ?? 0) >= 1 ? d : undefined;
      },
      15 * 60_000,
      5000,
    );
    expect(api.status?.availableReplicas).toBeGreaterThanOrEqual(1);
    const health = await ssh(
      sshPort,
      "curl -s --cacert /etc/icn-bootstrap/pki/registry-ca.crt https://bootstrap.icn:30443/healthz; echo; curl -s -o /dev/null -w '%{http_code}' --cacert /etc/icn-bootstrap/pki/registry-ca.crt https://bootstrap.icn:30443/api/v1/uploads",
    );
    console.log(`bpa-api on the appliance: ${health.stdout.replace(/\n/g, " | ")}`);
    expect(health.stdout.trim().split("\n").pop()).toBe("401");

    // A developer's uploads from another machine (the forwarded NodePort; 127.0.0.1 is in the
    // site certificate), with the ready-made uploader identity the README names.
    const token = (
      await c.core.createNamespacedServiceAccountToken({
        namespace: "bpa-system",
        name: "bpa-api-uploader",
        body: { spec: { audiences: [TOKEN_AUDIENCE], expirationSeconds: 3600 } },
      })
    ).status!.token;
    const caFile = join(work, "site-ca.crt");
    await writeFile(caFile, ca.data!["ca.crt"]!);
    const server = `https://127.0.0.1:${restPort}`;
    const rest = new ApiClient(server, ca.data!["ca.crt"]!, token);
    const upload = async (file: string, kind: string, name: string) => {
      const started = Date.now();
      const result = await runCli(["upload", file, "--kind", kind, "--name", name, "--server", server, "--cacert", caFile], {
        ICN_BPA_TOKEN: token,
        XDG_STATE_HOME: join(work, "xdg"),
      });
      expect(result.exitCode, result.all).toBe(0);
      console.log(`upload ${kind} ${name}: ${((Date.now() - started) / 1000).toFixed(1)}s`);
      return JSON.parse(result.stdout) as UploadRecord;
    };
    const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

    const blob = randomBytes(16 * 1024 * 1024);
    await writeFile(join(work, "blob.bin"), blob);
    const file = await upload(join(work, "blob.bin"), "file", "e2e/blob.bin");
    expect(file).toMatchObject({ state: "published", path: "/uploads/e2e/blob.bin", sha256: sha256(blob) });
    const servedFile = async () => (await ssh(sshPort, "curl -sf http://127.0.0.1:8080/uploads/e2e/blob.bin | sha256sum")).stdout.split(" ")[0];
    expect(await servedFile()).toBe(sha256(blob));

    await execa("qemu-img", ["create", "-q", "-f", "qcow2", join(work, "os.qcow2"), "1G"]);
    const osBytes = await readFile(join(work, "os.qcow2"));
    const os = await upload(join(work, "os.qcow2"), "os-image", "e2e-os.qcow2");
    expect(os).toMatchObject({ state: "published", format: "qcow2", path: "/os-images/e2e-os.qcow2" });
    const listed = await rest.json<{ items: unknown[] }>("/api/v1/os-images");
    expect(listed.status).toBe(200);
    expect(listed.body.items).toContainEqual(
      expect.objectContaining({ name: "e2e-os.qcow2", sha256: sha256(osBytes), url: "http://127.0.0.1:8080/os-images/e2e-os.qcow2" }),
    );
    expect((await ssh(sshPort, "curl -sf http://127.0.0.1:8080/os-images/e2e-os.qcow2.sha256sum")).stdout).toContain(sha256(osBytes));
    // The build's compute-node image is listed beside it, and served with its checksum file.
    const builtImage = (listed.body.items as { name: string; source: string; sha256: string; url: string }[]).find((i) => i.source === "build");
    expect(builtImage).toMatchObject({ name: "debian-13-compute-node.qcow2", url: "http://127.0.0.1:8080/os-images/debian-13-compute-node.qcow2" });
    expect((await ssh(sshPort, "curl -sf http://127.0.0.1:8080/os-images/debian-13-compute-node.qcow2.sha256sum")).stdout).toBe(
      `${builtImage!.sha256}  debian-13-compute-node.qcow2`,
    );
    expect((await ssh(sshPort, "curl -sf http://127.0.0.1:8080/os-images/debian-13-compute-node.qcow2 | sha256sum")).stdout.split(" ")[0]).toBe(
      builtImage!.sha256,
    );

    // A container image, pulled back by digest the way a compute node's containerd does:
    // over TLS from bootstrap.icn:5000, trusting the site CA.
    const { archive, layerDigest } = await dockerSaveArchive(work, "hello", { "hello.txt": "hello from the developer\n" });
    const pushed = await upload(archive, "container-image", "site/hello:1");
    expect(pushed).toMatchObject({ state: "published", url: `bootstrap.icn:5000/site/hello@${pushed.digest}` });
    const pull = await ssh(
      sshPort,
      `ctr -n e2e images pull --tlscacert /etc/icn-bootstrap/pki/registry-ca.crt ${pushed.url} >/dev/null && ctr -n e2e images ls -q && ctr -n e2e content get ${layerDigest} | tar -xO hello.txt`,
    );
    expect(pull.stdout).toContain(pushed.url);
    expect(pull.stdout).toContain("hello from the developer");

    // The state is on the data partition (ICN-DATA, /dev/vda6), beside system slot A.
    const dataDevice = (await ssh(sshPort, "stat -c %d /var/lib/icn-data")).stdout.trim();
    for (const path of ["/var/lib/etcd", "/etc/kubernetes/pki", "/var/lib/icn-bootstrap", "/var/lib/kubelet", "/etc/icn-bootstrap/pki"]) {
      const where = (await ssh(sshPort, `stat -c %d ${path}; findmnt -n -o SOURCE --target ${path}`)).stdout.trim().split("\n");
      expect(where, path).toEqual([dataDevice, expect.stringMatching(/^\/dev\/vda6\[\/state\//)]);
    }
    expect((await ssh(sshPort, "findmnt -n -o SOURCE /")).stdout.trim()).toBe("/dev/vda3");
    // The pushed image's manifest went to the registry overlay's upper layer, on the data partition.
    expect((await ssh(sshPort, "ls /var/lib/icn-data/registry/pushed/docker/registry/v2/repositories/")).stdout).toMatch(/^site$/m);
    const member = await etcdMember(sshPort);
    console.log(
      `etcd member before the reboot: ${member}; data partition: ${(await ssh(sshPort, "df -h --output=size,used /var/lib/icn-data | tail -n1")).stdout.trim()}`,
    );

    // Secrets at rest: a Secret's value and the key that encrypts it are nowhere on the
    // stopped machine's disk; the Secret is read back through the API server.
    const atRest = `at-rest-${randomBytes(12).toString("hex")}`;
    await c.core.createNamespacedSecret({ namespace: "default", body: { metadata: { name: "at-rest" }, stringData: { value: atRest } } });
    const secretsKey = await ssh(
      sshPort,
      "icn-secrets-key status; base64 -w0 /run/icn-bootstrap/secrets/$(head -n1 /var/lib/icn-bootstrap/secrets-key/order).key",
    );
    console.log(`the Secrets' key:\n  ${secretsKey.stdout.split("\n").slice(0, -1).join("\n  ")}`);
    expect(secretsKey.stdout).toMatch(/^kept: tpm \(PCRs 7\)/m);
    expect(secretsKey.stdout).not.toMatch(/^\s+identity: /m);
    const clearKey = Buffer.from(secretsKey.stdout.trim().split("\n").pop()!, "base64");
    expect(clearKey).toHaveLength(32);
    await ssh(sshPort, "sync");

    // Second boot: the cluster is not initialised again and the Provisioning is still there.
    await ssh(sshPort, "systemctl poweroff").catch(() => undefined);
    await vm.stop!();
    const searched = Date.now();
    const onTheDisk = await fileHolds(disk, [Buffer.from(atRest), clearKey, Buffer.from(clearKey.toString("base64"))]);
    console.log(`searched the stopped appliance's disk (${disk}) in ${((Date.now() - searched) / 1000).toFixed(0)} s`);
    expect(onTheDisk, "the Secret's value, the key, the key in base64").toEqual([false, false, false]);
    consoleLines.length = 0;
    const onDisk = (await execa("mdir", ["-/", "-b", "-i", siteDisk, "::/manifests"])).stdout;
    expect(onDisk).not.toMatch(/10-bmc-secret\.yaml/);
    expect(onDisk).toMatch(/20-hosts\.yaml/);
    vm = await boot(BOOT_TIMEOUT_S);
    expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
    expect(consoleLines.join("\n")).not.toMatch(/kubeadm init/);
    expect(await etcdMember(sshPort)).toBe(member); // the same etcd, from the data partition
    expect(consoleLines.join("\n")).not.toMatch(/ICN-SITE: applied/); // each file once per content
    const again = await c.custom.getNamespacedCustomObject({
      group: "bpa.akraino.org",
      version: "v1alpha1",
      namespace,
      plural: "provisionings",
      name: "provisioning-sample",
    });
    expect((again as Provisioning).status?.installJob).toBe(provisioning.status!.installJob);
    const readBack = await c.core.readNamespacedSecret({ namespace: "default", name: "at-rest" });
    expect(Buffer.from(readBack.data!.value!, "base64").toString()).toBe(atRest); // unsealed by the same TPM at the second boot
    // The uploads survived the reboot: still served, still listed by the API.
    expect(await servedFile()).toBe(sha256(blob));
    const uploads = await waitFor(
      "the REST API answering after the reboot",
      async () =>
        rest
          .json<{ items: UploadRecord[] }>("/api/v1/uploads")
          .then((r) => (r.status === 200 ? r.body : undefined))
          .catch(() => undefined),
      15 * 60_000,
      5000,
    );
    expect(uploads.items.map((u: UploadRecord) => `${u.kind} ${u.name} ${u.state}`)).toEqual(
      expect.arrayContaining(["file e2e/blob.bin published", "os-image e2e-os.qcow2 published", "container-image site/hello:1 published"]),
    );
  });
});
