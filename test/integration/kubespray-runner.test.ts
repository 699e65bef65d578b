/**
 * The kubespray runner (images/kubespray-runner/entrypoint.py) end to end, as far as this
 * environment allows: the BPA runner contract's inputs (inventory + offline.yml, SSH key,
 * BPA_* environment), the real `ansible-playbook` over real SSH to a test host (a network
 * namespace with its own sshd), the kubespray STAND-IN's cluster.yml pulling an image by
 * digest from a docker-registry serving the build's seeded registry tree and fetching
 * kubeadm from an nginx serving the build's files tree, the registry behind TLS (nginx, a
 * server certificate of a site CA made here) as on the appliance, the runner putting that
 * CA on the node before the playbook, and the kubeconfig handed back
 * into a Secret of a real kube-apiserver with a ServiceAccount token limited to that Secret.
 *
 * The kubespray release tarball is the stand-in (test/helpers/kubespray-standin.ts), served
 * from 127.0.0.1 and pinned by sha256 in a copy of the lock file, so the `files` stage
 * extracts it exactly as it would the real one.
 */
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { chmod, copyFile, mkdir, mkdtemp, readFile, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa, type ResultPromise } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir, runStages } from "../../builder/pipeline.js";
import { freePort, startRegistry, type RegistryServer } from "../../builder/registry/server.js";
import { FILES_ROOT, KUBESPRAY_TREE } from "../../builder/stages/files.js";
import { REGISTRY_STORAGE } from "../../builder/stages/registry.js";
import { REPO } from "../helpers/cli.js";
import { buildKubesprayStandIn, STANDIN_VERSION } from "../helpers/kubespray-standin.js";
import { makeTestCA, type TestCA } from "../helpers/fixtures/bpa/registry-ca.js";
import { runnerIdentity } from "../helpers/runner-identity.js";

const id = `${process.pid % 100000}`;
const NETNS = `icn-rt-${id}`;
const VETH_HOST = `icnh${id}`;
const VETH_NODE = `icnn${id}`;
// Private addresses only inside the namespace pair this test makes.
const HOST_IP = "10.123.0.1";
const NODE_IP = "10.123.0.2";

let work: string;
let sshd: ResultPromise | undefined;
let nginx: ResultPromise | undefined;
let registry: RegistryServer | undefined;
let tarballServer: Server | undefined;
let kubesprayTree: string;
let filesRoot: string;
let seededStorage: string;
let kubeadmSha256: string;
let kubernetesVersion: string;
let pauseRef: string;
/** The site CA and the registry behind TLS (host:port), as compute nodes reach the appliance's. */
let siteCA: TestCA;
let registryTls: string;

async function sh(cmd: string, args: string[]) {
  return execa(cmd, args, { all: true });
}

async function cleanupNetwork() {
  await execa("ip", ["netns", "del", NETNS], { reject: false });
  await execa("ip", ["link", "del", VETH_HOST], { reject: false });
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-runner-"));
  await chmod(work, 0o755);

  // The stand-in kubespray release, served over HTTP and pinned by sha256 in a copy of the lock file.
  const tarball = await buildKubesprayStandIn(work);
  const sha256 = createHash("sha256")
    .update(await readFile(tarball))
    .digest("hex");
  tarballServer = createServer((req, res) => {
    if (req.url !== `/${tarball.split("/").pop()}`) return void res.writeHead(404).end();
    res.writeHead(200);
    createReadStream(tarball).pipe(res);
  });
  await new Promise<void>((r) => tarballServer!.listen(0, "127.0.0.1", r));
  const port = (tarballServer.address() as { port: number }).port;
  const lockText = await readFile(DEFAULT_LOCK, "utf8");
  const lock = yaml.load(lockText) as { artifacts: Record<string, unknown> };
  lock.artifacts.kubespray = {
    source: "url",
    url: `http://127.0.0.1:${port}/${tarball.split("/").pop()}`,
    sha256,
    version: STANDIN_VERSION,
    executable: false,
    profile: "default",
  };
  const lockPath = join(work, "appliance.lock.yaml");
  await writeFile(lockPath, yaml.dump(lock));
  await copyFile(join(REPO, "appliance.yaml"), join(work, "appliance.yaml"));

  // The build's stages 3-5 with kubespray enabled: the files tree (kubeadm, the release
  // tarball), the images and the seeded registry tree (the runner image itself needs a
  // pinned digest for the real kubespray, so it is not selected here: see README).
  const definition = { ...(await loadDefinition(join(work, "appliance.yaml"))), kubespray: { enabled: true } };
  // record: built as the recipes say, digests not checked against registry-seed/ (the BPA
  // image's pin moves with every bpa/ change until `icn-bootstrap lock-images` re-pins it;
  // the pins are the image tests' business). The pause image used below is compared with its pin.
  const content = await runStages({
    definition: { ...definition, kubespray: { enabled: false, extraKubernetesVersions: [] } },
    lock: await loadLock(lockPath),
    lockPath,
    stagesDir: stagesDir(),
    record: true,
    sections: ["content"],
  });
  const { runStage } = await import("../../builder/stage.js");
  const { filesStage } = await import("../../builder/stages/files.js");
  const files = await runStage(
    filesStage,
    { lock: await loadLock(lockPath), lockPath, kubespray: true, images: content.selection!.images.map((i) => i.ref) },
    stagesDir(),
  );
  kubesprayTree = join(files.dir, KUBESPRAY_TREE);
  filesRoot = join(files.dir, "tree", FILES_ROOT);
  seededStorage = join(content.registry!.dir, "tree", REGISTRY_STORAGE);
  kubernetesVersion = ((await loadLock(lockPath)).artifacts.kubernetes as { version: string }).version;
  pauseRef = content.selection!.images.find((i) => i.ref.startsWith("registry.k8s.io/pause:"))!.ref;
  kubeadmSha256 = (await readFile(join(filesRoot, `kubespray/dl.k8s.io/release/${kubernetesVersion}/bin/linux/amd64/kubeadm.sha256`), "utf8")).trim();

  // The test host: a network namespace joined to this one by a veth pair.
  await cleanupNetwork();
  await sh("ip", ["netns", "add", NETNS]);
  await sh("ip", ["link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NODE]);
  await sh("ip", ["link", "set", VETH_NODE, "netns", NETNS]);
  await sh("ip", ["addr", "add", `${HOST_IP}/30`, "dev", VETH_HOST]);
  await sh("ip", ["link", "set", VETH_HOST, "up"]);
  await sh("ip", ["-n", NETNS, "addr", "add", `${NODE_IP}/30`, "dev", VETH_NODE]);
  await sh("ip", ["-n", NETNS, "link", "set", VETH_NODE, "up"]);
  await sh("ip", ["-n", NETNS, "link", "set", "lo", "up"]);

  // sshd inside it: its own host key and config, key authentication only.
  const ssh = join(work, "ssh");
  await mkdir(ssh, { mode: 0o700 });
  await sh("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(ssh, "host_key")]);
  await sh("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "bpa", "-f", join(ssh, "id_ed25519")]);
  await chmod(join(ssh, "id_ed25519"), 0o400); // as the BPA mounts it
  await copyFile(join(ssh, "id_ed25519.pub"), join(ssh, "authorized_keys"));
  await mkdir("/run/sshd", { recursive: true });
  await writeFile(
    join(ssh, "sshd_config"),
    [
      `ListenAddress ${NODE_IP}`,
      "Port 22",
      `HostKey ${join(ssh, "host_key")}`,
      `PidFile ${join(ssh, "sshd.pid")}`,
      `AuthorizedKeysFile ${join(ssh, "authorized_keys")}`,
      "PubkeyAuthentication yes",
      "PasswordAuthentication no",
      "KbdInteractiveAuthentication no",
      "PermitRootLogin prohibit-password",
      "StrictModes no",
      "UsePAM no",
      "",
    ].join("\n"),
  );
  sshd = execa("ip", ["netns", "exec", NETNS, "/usr/sbin/sshd", "-D", "-e", "-f", join(ssh, "sshd_config")], { reject: false, all: true });

  // The appliance's registry (the seeded tree, read-only) and file server, on the host side of the veth.
  registry = await startRegistry(seededStorage, { host: HOST_IP, readOnly: true });
  const nginxPort = await freePort(HOST_IP);
  const nginxDir = join(work, "nginx");
  await mkdir(join(nginxDir, "logs"), { recursive: true });
  // The registry over TLS: a site CA and a server certificate for the host's address, as the appliance's first boot makes them.
  siteCA = makeTestCA("runner test site CA");
  await writeFile(join(nginxDir, "ca.crt"), siteCA.pem);
  await writeFile(join(nginxDir, "ca.key"), siteCA.keyPem, { mode: 0o600 });
  await sh("openssl", [
    "req",
    "-new",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    join(nginxDir, "tls.key"),
    "-out",
    join(nginxDir, "tls.csr"),
    "-subj",
    "/CN=registry",
    "-addext",
    `subjectAltName=IP:${HOST_IP}`,
  ]);
  await sh("openssl", [
    "x509",
    "-req",
    "-in",
    join(nginxDir, "tls.csr"),
    "-CA",
    join(nginxDir, "ca.crt"),
    "-CAkey",
    join(nginxDir, "ca.key"),
    "-CAcreateserial",
    "-days",
    "1",
    "-copy_extensions",
    "copy",
    "-out",
    join(nginxDir, "tls.crt"),
  ]);
  const tlsPort = await freePort(HOST_IP);
  registryTls = `${HOST_IP}:${tlsPort}`;
  await writeFile(
    join(nginxDir, "nginx.conf"),
    `daemon off;\nuser root;\npid ${nginxDir}/nginx.pid;\nerror_log ${nginxDir}/logs/error.log;\nevents {}\nhttp {\n  access_log ${nginxDir}/logs/access.log;\n  client_body_temp_path ${nginxDir}/body; proxy_temp_path ${nginxDir}/proxy; fastcgi_temp_path ${nginxDir}/fastcgi; uwsgi_temp_path ${nginxDir}/uwsgi; scgi_temp_path ${nginxDir}/scgi;\n  server {\n    listen ${HOST_IP}:${nginxPort};\n    root ${filesRoot};\n    autoindex on;\n    sendfile on;\n    location / { try_files $uri $uri/ =404; }\n  }\n  server {\n    listen ${registryTls} ssl;\n    ssl_certificate ${nginxDir}/tls.crt;\n    ssl_certificate_key ${nginxDir}/tls.key;\n    location /v2/ { proxy_pass http://${registry.address}; proxy_set_header Host $http_host; proxy_set_header X-Forwarded-Proto https; }\n  }\n}\n`,
  );
  nginx = execa("/usr/sbin/nginx", ["-p", nginxDir, "-c", join(nginxDir, "nginx.conf")], { reject: false, all: true });
  process.env.ICN_TEST_FILES_REPO = `http://${HOST_IP}:${nginxPort}/kubespray`;
  for (let i = 0; i < 100; i++) {
    const ready = await execa("ip", ["netns", "exec", NETNS, "sh", "-c", `exec 3<>/dev/tcp/${NODE_IP}/22`], { reject: false, shell: false });
    const files = await fetch(`${process.env.ICN_TEST_FILES_REPO}/`)
      .then((r) => r.ok)
      .catch(() => false);
    const tls = await execa("sh", ["-c", `exec 3<>/dev/tcp/${HOST_IP}/${tlsPort}`], { reject: false });
    if (ready.exitCode === 0 && files && tls.exitCode === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
}, 30 * 60_000);

afterAll(async () => {
  for (const child of [sshd, nginx]) {
    if (child && child.exitCode === null) {
      child.kill("SIGTERM");
      await child;
    }
  }
  await registry?.stop();
  await new Promise<void>((r) => (tarballServer ? tarballServer.close(() => r()) : r()));
  await cleanupNetwork();
  await execa("rm", ["-rf", work], { reject: false });
});

describe("the kubespray runner against a test host in a network namespace", () => {
  it(
    "runs the stand-in cluster.yml over SSH (registry pull + file fetch on the node) and hands the kubeconfig back into the Secret",
    async () => {
      // The Kubernetes side of the contract: the empty Secret, and a ServiceAccount that may only touch it.
      const kc = new KubeConfig();
      kc.loadFromFile(inject("kubeconfigPath"));
      const core = kc.makeApiClient(CoreV1Api);
      const namespace = `runner-${id}`;
      const secret = "sample-kubeconfig";
      await core.createNamespace({ body: { metadata: { name: namespace } } });
      await core.createNamespacedSecret({ namespace, body: { metadata: { name: secret } } });
      const sa = join(work, "serviceaccount");
      const { server } = await runnerIdentity(
        kc,
        namespace,
        "sample-runner",
        [{ apiGroups: [""], resources: ["secrets"], resourceNames: [secret], verbs: ["get", "update", "patch"] }],
        sa,
      );

      // The inventory as the BPA writes it (bpa/inventory: hosts.ini + group_vars/all/offline.yml).
      const inventory = join(work, "inventory");
      await mkdir(join(inventory, "group_vars/all"), { recursive: true });
      await writeFile(
        join(inventory, "hosts.ini"),
        `[all]\nnode1 ansible_host=${NODE_IP} ip=${NODE_IP} etcd_member_name=etcd1\n\n[kube_control_plane]\nnode1\n\n[etcd]\nnode1\n\n[kube_node]\nnode1\n\n[calico_rr]\n\n[k8s_cluster:children]\nkube_control_plane\nkube_node\ncalico_rr\n`,
      );
      const { groupVars } = await import("../../bpa/inventory/group-vars.js");
      const { parseConfig } = await import("../../bpa/config/config.js");
      // The CA goes to a path under the test's directory: the node (a network namespace) shares this machine's files.
      const caNodePath = join(work, "node-etc/icn-bootstrap/registry-ca.crt");
      const vars = groupVars(
        parseConfig(
          {
            runnerImage: "bootstrap.icn:5000/icn/kubespray-runner:latest",
            registryHost: registryTls,
            filesRepo: process.env.ICN_TEST_FILES_REPO!,
            registryCA: { nodePath: caNodePath },
          },
          "test",
        ),
      );
      await writeFile(join(inventory, "registry-ca.crt"), siteCA.pem);
      const nodeDir = join(work, "node");
      await writeFile(
        join(inventory, "group_vars/all/offline.yml"),
        yaml.dump({
          ...vars,
          kube_version: kubernetesVersion.replace(/^v/, ""),
          pod_infra_version: pauseRef.split(":")[1],
          kubeadm_sha256: kubeadmSha256,
          standin_node_dir: nodeDir,
        }),
      );

      const result = await execa("python3", [join(REPO, "images/kubespray-runner/entrypoint.py"), "install"], {
        reject: false,
        all: true,
        env: {
          BPA_MODE: "install",
          BPA_INVENTORY: join(inventory, "hosts.ini"),
          BPA_PLAYBOOK: "cluster.yml",
          BPA_SSH_KEY: join(work, "ssh/id_ed25519"),
          BPA_KUBESPRAY_DIR: kubesprayTree,
          BPA_KUBECONFIG_SECRET: secret,
          BPA_KUBECONFIG_SECRET_KEY: "kubeconfig",
          BPA_NAMESPACE: namespace,
          BPA_PROVISIONING: "sample",
          BPA_INSTALL_HASH: "0123456789abcdef0123",
          BPA_REGISTRY_CA: join(inventory, "registry-ca.crt"),
          BPA_REGISTRY_CA_NODE_PATH: caNodePath,
          BPA_SERVICEACCOUNT_DIR: sa,
          BPA_WORK_DIR: work,
          KUBERNETES_SERVICE_HOST: server.hostname,
          KUBERNETES_SERVICE_PORT: server.port || "443",
          ANSIBLE_HOST_KEY_CHECKING: "False",
          // The host's Debian ansible-core has no Mitogen; the runner image's is tested in kubespray-inventory.test.ts.
          BPA_ANSIBLE_STRATEGY: "linear",
          ANSIBLE_SSH_ARGS: "-o ControlMaster=no -o UserKnownHostsFile=/dev/null",
        },
      });
      expect(result.exitCode, result.all).toBe(0);
      expect(result.all).toMatch(/ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0/);
      expect(result.all).toContain(`kubeconfig handed back: Secret ${namespace}/${secret} key kubeconfig`);

      // The site CA reached the node before the stand-in's cluster.yml, which found it there (its assert) and pulled over TLS with it.
      expect(await readFile(caNodePath, "utf8")).toBe(siteCA.pem);
      const caStat = await stat(caNodePath);
      expect({ mode: caStat.mode & 0o777, uid: caStat.uid }).toEqual({ mode: 0o644, uid: 0 });
      const output = result.all!;
      expect(output.indexOf(`putting the registry's site CA ${join(inventory, "registry-ca.crt")} on every node at ${caNodePath}`)).toBeGreaterThan(-1);
      expect(output.indexOf("Put the registry's site CA on every node")).toBeLessThan(output.indexOf("Stand-in cluster.yml"));
      expect(output).toMatch(/TASK \[The CA is already on the node \(put there before this playbook\), 0644, owned by root\][^\n]*\nok: \[node1\]/);

      // On the node: the image pulled by digest from the seeded registry, and kubeadm from the file server.
      const seeded = yaml.load(await readFile(join(REPO, "registry-seed/bootstrap.yaml"), "utf8")) as { images: { ref: string; digest: string }[] };
      const pause = seeded.images.find((i) => i.ref === pauseRef)!;
      expect((await readFile(join(nodeDir, "pause.digest"), "utf8")).trim()).toBe(pause.digest);
      expect(
        createHash("sha256")
          .update(await readFile(join(nodeDir, "kubeadm")))
          .digest("hex"),
      ).toBe(kubeadmSha256);

      // In the API: the kubeconfig, pointed at the first control-plane host.
      const stored = await core.readNamespacedSecret({ name: secret, namespace });
      const kubeconfig = Buffer.from(stored.data!.kubeconfig!, "base64").toString();
      expect(kubeconfig).toContain("STAND-IN kubeconfig");
      expect(kubeconfig).toMatch(new RegExp(`server: https://${NODE_IP.replace(/\./g, "\\.")}:6443`));

      // The runner's token could write that Secret and nothing else.
      const token = (await readFile(join(sa, "token"), "utf8")).trim();
      const other = await fetch(`${server.origin}/api/v1/namespaces/${namespace}/secrets`, { headers: { Authorization: `Bearer ${token}` } }).catch(
        () => undefined,
      );
      expect(other === undefined || other.status === 403).toBe(true);
    },
    10 * 60_000,
  );

  it(
    "fails with the playbook's exit code and names the cause when the host cannot be reached",
    async () => {
      const inventory = join(work, "inventory-bad");
      await mkdir(inventory, { recursive: true });
      // The test host, on a port where nothing listens: ssh is refused at once.
      await writeFile(join(inventory, "hosts.ini"), `[all]\nnode9 ansible_host=${NODE_IP} ansible_port=2222 ip=${NODE_IP}\n[kube_control_plane]\nnode9\n`);
      await writeFile(join(inventory, "registry-ca.crt"), siteCA.pem);
      const result = await execa("python3", [join(REPO, "images/kubespray-runner/entrypoint.py"), "install"], {
        reject: false,
        all: true,
        env: {
          BPA_INVENTORY: join(inventory, "hosts.ini"),
          BPA_SSH_KEY: join(work, "ssh/id_ed25519"),
          BPA_KUBESPRAY_DIR: kubesprayTree,
          BPA_WORK_DIR: work,
          ANSIBLE_TIMEOUT: "3",
          ANSIBLE_HOST_KEY_CHECKING: "False",
          // The host's Debian ansible-core has no Mitogen; the runner image's is tested in kubespray-inventory.test.ts.
          BPA_ANSIBLE_STRATEGY: "linear",
          BPA_TERMINATION_LOG: join(work, "termination-log"),
        },
      });
      expect(result.exitCode).not.toBe(0);
      // The first thing that needs the host is putting the CA on it: the task, the host and ssh's answer are named.
      expect(result.all).toMatch(
        /bpa-runner: error: could not put the registry's site CA on the nodes at \/etc\/icn-bootstrap\/registry-ca\.crt \(ansible-playbook exit code \d+: task "The CA's directory" unreachable on host node9: Failed to connect to the host via ssh: .*Connection refused\); cluster\.yml was not run/,
      );
      // The same words are the pod's termination message, which the BPA puts in the Failed condition.
      expect(await readFile(join(work, "termination-log"), "utf8")).toMatch(
        /^could not put the registry's site CA .* task "The CA's directory" unreachable on host node9: /,
      );
    },
    2 * 60_000,
  );

  it("refuses to start without the registry's site CA in the mounted inventory, naming the file", async () => {
    const inventory = join(work, "inventory-no-ca");
    await mkdir(inventory, { recursive: true });
    await writeFile(join(inventory, "hosts.ini"), `[all]\nnode1 ansible_host=${NODE_IP} ip=${NODE_IP}\n[kube_control_plane]\nnode1\n`);
    const result = await execa("python3", [join(REPO, "images/kubespray-runner/entrypoint.py"), "install"], {
      reject: false,
      all: true,
      env: { BPA_INVENTORY: join(inventory, "hosts.ini"), BPA_SSH_KEY: join(work, "ssh/id_ed25519"), BPA_KUBESPRAY_DIR: kubesprayTree, BPA_WORK_DIR: work },
    });
    expect(result.exitCode).toBe(1);
    expect(result.all).toContain(`bpa-runner: error: the registry's site CA ${join(inventory, "registry-ca.crt")} is missing from the mounted inventory`);
    expect(result.all).toContain("key registry-ca.crt of the inventory ConfigMap");
    expect(result.all).not.toContain("PLAY"); // no ansible ran
    // Not a certificate: named as well.
    await writeFile(join(inventory, "registry-ca.crt"), "hello\n");
    const bad = await execa("python3", [join(REPO, "images/kubespray-runner/entrypoint.py"), "install"], {
      reject: false,
      all: true,
      env: { BPA_INVENTORY: join(inventory, "hosts.ini"), BPA_SSH_KEY: join(work, "ssh/id_ed25519"), BPA_KUBESPRAY_DIR: kubesprayTree, BPA_WORK_DIR: work },
    });
    expect(bad.exitCode).toBe(1);
    expect(bad.all).toContain(`the registry's site CA ${join(inventory, "registry-ca.crt")} holds no PEM certificate`);
  }, 60_000);

  it("refuses to start when the kubespray pins it is told to pass are missing, running nothing", async () => {
    const inventory = join(work, "inventory-no-pins");
    await mkdir(inventory, { recursive: true });
    await writeFile(join(inventory, "hosts.ini"), `[all]\nnode1 ansible_host=${NODE_IP} ip=${NODE_IP}\n[kube_control_plane]\nnode1\n`);
    await writeFile(join(inventory, "registry-ca.crt"), siteCA.pem);
    const pins = join(work, "no-such-pins.yml");
    const result = await execa("python3", [join(REPO, "images/kubespray-runner/entrypoint.py"), "install"], {
      reject: false,
      all: true,
      env: {
        BPA_INVENTORY: join(inventory, "hosts.ini"),
        BPA_SSH_KEY: join(work, "ssh/id_ed25519"),
        BPA_KUBESPRAY_DIR: kubesprayTree,
        BPA_WORK_DIR: work,
        BPA_KUBESPRAY_PINS: pins,
      },
    });
    expect(result.exitCode).toBe(1);
    expect(result.all).toContain(`bpa-runner: error: the kubespray pins ${pins} are missing (BPA_KUBESPRAY_PINS)`);
    expect(result.all).not.toContain("PLAY");
  }, 60_000);
});
