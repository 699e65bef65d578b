/**
 * The seeded registry and the file server inside the built image: the registry storage
 * tree is copied out of the image's root filesystem (debugfs), served by a real
 * docker-registry, and every listed image is checked through the registry API against
 * the digests pinned in registry-seed/ (every blob re-hashed); each blob is stored once.
 * containerd's configuration is parsed by the image's own containerd.
 */
import { HELM_CHART_MEDIA_TYPE, HELM_CONFIG_MEDIA_TYPE } from "../../common/helm-chart.js";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadSeedLists, selectImages, type SelectedImage } from "../../builder/images/seed.js";
import { artifactPaths } from "../../builder/sources/index.js";
import { startRegistry, type RegistryServer } from "../../builder/registry/server.js";
import { REPO, runCli, type CliResult } from "../helpers/cli.js";
import { debugfs, partitionAddress, statInFs } from "../helpers/image.js";

const BUILD_TIMEOUT = 60 * 60_000;
const ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

let out: string;
let build: CliResult;
let root: string;
let extracted: string;
let registry: RegistryServer | undefined;
let expected: SelectedImage[];

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "icn-reg-out-"));
  build = await runCli(["build", "--format", "usb", "--out", out]);
  if (build.exitCode !== 0) return;
  root = (await partitionAddress(join(out, "icn-bootstrap.img"), 3)).ext;
  extracted = await mkdtemp(join(tmpdir(), "icn-reg-tree-"));
  await execa("debugfs", ["-R", `rdump /var/lib/docker-registry ${extracted}`, root]);
  registry = await startRegistry(join(extracted, "docker-registry"), { readOnly: true });
  const lists = ["registry-seed/bootstrap.yaml", "registry-seed/application.yaml", "registry-seed/addons.yaml"].map((l) => join(REPO, l));
  // The default definition: kubespray on, so the runner and the application clusters' images too.
  expected = selectImages(await loadSeedLists(lists), { profile: "default", kubespray: true }).images;
}, BUILD_TIMEOUT);

afterAll(async () => {
  await registry?.stop();
  await rm(out, { recursive: true, force: true });
  if (extracted) await rm(extracted, { recursive: true, force: true });
});

async function json<T>(path: string): Promise<T> {
  const response = await fetch(`${registry!.url}${path}`, { headers: { Accept: ACCEPT } });
  expect(response.status, path).toBe(200);
  return (await response.json()) as T;
}

async function blobSha256(repository: string, digest: string): Promise<string> {
  const response = await fetch(`${registry!.url}/v2/${repository}/blobs/${digest}`);
  expect(response.status).toBe(200);
  const hash = createHash("sha256");
  for await (const chunk of response.body!) hash.update(chunk as Uint8Array);
  return `sha256:${hash.digest("hex")}`;
}

describe("the seeded registry inside the image", () => {
  it("builds", () => {
    expect(build.exitCode, build.all).toBe(0);
    expect(build.stderr).toMatch(/registry\s+(reused|done in)/);
  });

  it("serves exactly the listed images, each tag at its pinned digest, every blob intact", async () => {
    const catalog = await json<{ repositories: string[] }>("/v2/_catalog");
    expect(catalog.repositories.sort()).toEqual([...new Set(expected.map((i) => i.repository))].sort());
    for (const image of expected) {
      const tags = await json<{ tags: string[] }>(`/v2/${image.repository}/tags/list`);
      expect(tags.tags.sort()).toEqual([image.tag, ...image.tags].sort());
      for (const tag of tags.tags) {
        const head = await fetch(`${registry!.url}/v2/${image.repository}/manifests/${tag}`, { method: "HEAD", headers: { Accept: ACCEPT } });
        expect(head.headers.get("docker-content-digest"), `${image.ref} (${tag})`).toBe(image.digest);
      }
      const response = await fetch(`${registry!.url}/v2/${image.repository}/manifests/${image.digest}`, { headers: { Accept: ACCEPT } });
      const body = Buffer.from(await response.arrayBuffer());
      expect(`sha256:${createHash("sha256").update(body).digest("hex")}`).toBe(image.digest);
      const manifest = JSON.parse(body.toString()) as { config: { digest: string }; layers: { digest: string }[] };
      for (const blob of [manifest.config, ...manifest.layers])
        expect(await blobSha256(image.repository, blob.digest), `${image.ref} ${blob.digest}`).toBe(blob.digest);
    }
  });

  it("serves the charts (the addons', the components') as Helm's OCI artifacts: the chart's metadata as config, the packaged chart as the one layer", async () => {
    const charts = expected.filter((i) => i.repository.startsWith("charts/"));
    expect(charts.map((c) => c.ref)).toContain("bootstrap.icn:5000/charts/multus:4.3.0");
    for (const chart of charts) {
      const manifest = await json<{ config: { mediaType: string; digest: string }; layers: { mediaType: string; digest: string }[] }>(
        `/v2/${chart.repository}/manifests/${chart.digest}`,
      );
      expect(manifest.config.mediaType).toBe(HELM_CONFIG_MEDIA_TYPE);
      expect(manifest.layers.map((l) => l.mediaType)).toEqual([HELM_CHART_MEDIA_TYPE]);
      const config = await json<{ name: string; version: string }>(`/v2/${chart.repository}/blobs/${manifest.config.digest}`);
      expect(`${config.name}:${config.version}`).toBe(`${chart.repository.split("/").pop()}:${chart.tag}`);
      // Rendered by the pinned Helm as the appliance would install it (its defaults, or
      // ci/appliance-values.yaml for a chart that needs values: chart-testing's convention),
      // every image it runs is one the registry serves, by its reference or an extra tag.
      const tgz = join(out, `${config.name}.tgz`);
      const blob = await fetch(`${registry!.url}/v2/${chart.repository}/blobs/${manifest.layers[0]!.digest}`);
      await writeFile(tgz, Buffer.from(await blob.arrayBuffer()));
      const unpacked = join(out, "charts");
      await mkdir(unpacked, { recursive: true });
      await execa("tar", ["-xzf", tgz, "-C", unpacked]);
      const applianceValues = join(unpacked, config.name, "ci", "appliance-values.yaml");
      const values = (await stat(applianceValues).catch(() => undefined)) ? ["-f", applianceValues] : [];
      const served = expected.flatMap((e) => [e.ref, ...e.tags.map((tag) => e.ref.replace(/:[^:/]+$/, `:${tag}`))]);
      const { helm } = await artifactPaths(["helm"]);
      const rendered = await execa(helm, ["template", config.name, tgz, "--namespace", "addons-test", ...values], {
        env: { HELM_CACHE_HOME: join(out, "helm") },
      });
      const images = [...rendered.stdout.matchAll(/^\s+image: "?([^"\s]+)"?$/gm)].map((m) => m[1]!);
      expect(images.length, chart.ref).toBeGreaterThan(0);
      for (const image of images) expect(served, `${chart.ref} runs ${image}`).toContain(image);
    }
  });

  it("stores each blob once: the storage holds exactly the distinct blobs of the images, within 2% of their size", async () => {
    const referenced = new Map<string, number>();
    let layerBytes = 0;
    const layers = new Set<string>();
    for (const image of expected) {
      const response = await fetch(`${registry!.url}/v2/${image.repository}/manifests/${image.digest}`, { headers: { Accept: ACCEPT } });
      const body = Buffer.from(await response.arrayBuffer());
      referenced.set(image.digest!, body.length);
      const manifest = JSON.parse(body.toString()) as { config: { digest: string; size: number }; layers: { digest: string; size: number }[] };
      for (const blob of [manifest.config, ...manifest.layers]) referenced.set(blob.digest, blob.size);
      for (const layer of manifest.layers) {
        if (!layers.has(layer.digest)) layerBytes += layer.size;
        layers.add(layer.digest);
      }
    }
    const blobsDir = join(extracted, "docker-registry/docker/registry/v2/blobs/sha256");
    const stored: string[] = [];
    for (const prefix of await readdir(blobsDir)) for (const hex of await readdir(join(blobsDir, prefix))) stored.push(`sha256:${hex}`);
    expect(stored.sort()).toEqual([...referenced.keys()].sort());
    // The Debian base layer is shared (kube-proxy, bpa) and stored once.
    const uses = new Map<string, number>();
    for (const image of expected) {
      const m = await json<{ layers: { digest: string }[] }>(`/v2/${image.repository}/manifests/${image.digest}`);
      for (const l of m.layers) uses.set(l.digest, (uses.get(l.digest) ?? 0) + 1);
    }
    expect(Math.max(...uses.values())).toBeGreaterThanOrEqual(2);
    const { stdout } = await execa("du", ["-s", "--apparent-size", "--block-size=1", join(extracted, "docker-registry")]);
    const storageBytes = Number(stdout.split(/\s/)[0]);
    expect(storageBytes / layerBytes).toBeLessThanOrEqual(1.02);
  });
});

describe("the appliance's registry, file server and containerd configuration", () => {
  it("enables docker-registry, nginx and containerd, and ships their configuration", async () => {
    for (const unit of ["docker-registry.service", "nginx.service", "containerd.service"]) {
      expect(await statInFs(root, `/etc/systemd/system/multi-user.target.wants/${unit}`), unit).toBeDefined();
    }
    // The registry itself has no TCP port: a unix socket behind nginx's TLS on 5000.
    const config = await debugfs(root, "cat /etc/docker/registry/config.yml");
    expect(config).toMatch(/net: unix\n\s+addr: \/run\/docker-registry\/registry\.sock/);
    expect(config).not.toMatch(/addr: :?\d+/);
    expect(await debugfs(root, "cat /etc/systemd/system/docker-registry.service.d/icn-bootstrap.conf")).toMatch(
      /chown -R docker-registry:docker-registry \/var\/lib\/docker-registry/,
    );
    const site = await debugfs(root, "cat /etc/nginx/conf.d/icn-bootstrap-registry.conf");
    expect(site).toMatch(/listen 5000 ssl;/);
    expect(site).toMatch(/listen 127\.0\.0\.1:5001;\n[^}]*location \/v2\/ \{\n\s+limit_except GET \{\n\s+deny all;/);
    // kubeadm's patches: the static pods get time to start under emulation.
    expect(await debugfs(root, "cat /etc/icn-bootstrap/kubeadm.yaml")).toMatch(/patches:\n\s+directory: \/etc\/icn-bootstrap\/kubeadm-patches/);
    expect(await debugfs(root, "cat /etc/icn-bootstrap/kubeadm-patches/corednsdeployment+strategic.yaml")).toMatch(/^spec:\n\s+replicas: 1\s*$/m);
    for (const pod of ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]) {
      expect(await debugfs(root, `cat /etc/icn-bootstrap/kubeadm-patches/${pod}+strategic.yaml`), pod).toMatch(
        new RegExp(`- name: ${pod}\\n\\s+startupProbe:\\n\\s+failureThreshold: 180`),
      );
    }
    // The node agents come after the pods when the CPU is short: a top-level slice (no dash: a dash nests it in another,
    // whose weight would count instead) weighing less than system.slice (100); etcd's CPU request above kubeadm's 100m.
    for (const unit of ["containerd.service", "kubelet.service"]) {
      const slice = /^Slice=(\S+)$/m.exec(await debugfs(root, `cat /etc/systemd/system/${unit}`))?.[1];
      expect(slice, unit).toMatch(/^[^-]+\.slice$/);
      const weight = /^CPUWeight=(\d+)$/m.exec(await debugfs(root, `cat /etc/systemd/system/${slice}`));
      expect(Number(weight?.[1]), slice).toBeLessThan(100);
    }
    expect(await debugfs(root, "cat /etc/icn-bootstrap/kubeadm-patches/etcd+strategic.yaml")).toMatch(/requests:\n\s+cpu: 400m/);
    expect(await statInFs(root, "/etc/nginx/sites-enabled/default")).toBeUndefined();
    for (const registryHost of ["docker.io", "registry.k8s.io", "quay.io", "ghcr.io", "gcr.io", "bootstrap.icn:5000"]) {
      const hosts = await debugfs(root, `cat "/etc/containerd/certs.d/${registryHost}/hosts.toml"`);
      // The appliance's own pulls: nginx's read-only plain door on loopback (the site network gets TLS on 5000).
      expect(hosts, registryHost).toMatch(/\[host\."http:\/\/127\.0\.0\.1:5001"\]\n\s+capabilities = \["pull", "resolve"\]\s*$/);
    }
  });

  it("ships no registry key, certificate or password: first boot makes them", async () => {
    for (const path of ["/etc/icn-bootstrap/pki", "/etc/nginx/icn-registry.htpasswd", "/srv/icn-bootstrap/files/icn-registry-ca.crt"]) {
      expect(await statInFs(root, path), path).toBeUndefined();
    }
    expect(await statInFs(root, "/etc/systemd/system/multi-user.target.wants/icn-registry-pki.service")).toBeDefined();
  });

  it("makes every seeded tag immutable: one nginx rule per tag, with its pinned digest", async () => {
    const rules = await debugfs(root, "cat /etc/nginx/icn-registry-seeded.conf");
    const seed = yaml.load(await readFile(join(REPO, "registry-seed/bootstrap.yaml"), "utf8")) as { images: { ref: string; digest?: string }[] };
    const pause = seed.images.find((i) => i.ref === "registry.k8s.io/pause:3.10.1")!;
    expect(rules).toContain(`"PUT /v2/pause/manifests/3.10.1" "pause:3.10.1 is shipped with this appliance at ${pause.digest}";`);
    expect(rules).toContain(`"PUT /v2/icn/bpa/manifests/latest"`);
  });

  it("serves the offline files at files_repo: kubeadm, kubelet, kubectl for v1.35.4 with their sha256", async () => {
    for (const name of ["kubeadm", "kubelet", "kubectl"]) {
      const path = `/srv/icn-bootstrap/files/kubespray/dl.k8s.io/release/v1.35.4/bin/linux/amd64/${name}`;
      const info = await statInFs(root, path);
      expect(info?.type, path).toBe("regular");
      expect(info!.size).toBeGreaterThan(10 * 1024 * 1024);
      expect((await debugfs(root, `cat ${path}.sha256`)).trim()).toMatch(/^[0-9a-f]{64}$/);
    }
    const conf = await debugfs(root, "cat /etc/nginx/conf.d/icn-bootstrap-files.conf");
    expect(conf).toMatch(/listen 8080/);
    // nginx accepts the snippet (inside an http block, as Debian's nginx.conf includes conf.d/*.conf).
    const dir = await mkdtemp(join(tmpdir(), "icn-nginx-"));
    try {
      await writeFile(join(dir, "site.conf"), conf);
      await writeFile(join(dir, "nginx.conf"), `pid ${dir}/pid;\nerror_log ${dir}/error.log;\nevents {}\nhttp { include ${dir}/site.conf; }\n`);
      const test = await execa("/usr/sbin/nginx", ["-t", "-p", dir, "-c", join(dir, "nginx.conf")], { reject: false, all: true });
      expect(test.exitCode, test.all).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("has a containerd configuration that the image's containerd (the pinned 2.3 release) parses, with the pause image, systemd cgroups, the pinned runc and the mirrors", async () => {
    const dir = await mkdtemp(join(tmpdir(), "icn-containerd-"));
    try {
      await execa("debugfs", ["-R", `dump /usr/local/bin/containerd ${dir}/containerd`, root]);
      await execa("debugfs", ["-R", `dump /etc/containerd/config.toml ${dir}/config.toml`, root]);
      expect((await stat(join(dir, "containerd"))).size).toBeGreaterThan(1024 * 1024);
      await execa("chmod", ["+x", join(dir, "containerd")]);
      expect((await execa(join(dir, "containerd"), ["--version"])).stdout).toMatch(/ v2\.3\.\d+ /);
      const { stdout, stderr } = await execa(join(dir, "containerd"), ["--config", join(dir, "config.toml"), "config", "dump"]);
      // Written in the release's own configuration version: no migration at every start.
      expect(stderr).not.toMatch(/migrated/);
      // The pause image the registry is seeded with (what kubeadm of the pinned version expects).
      const pause = expected.find((i) => i.ref.startsWith("registry.k8s.io/pause:"))!;
      expect(stdout).toContain(`sandbox = '${pause.ref}'`);
      expect(stdout).toMatch(/SystemdCgroup = true/);
      expect(stdout).toMatch(/BinaryName = '\/usr\/local\/bin\/runc'/);
      expect(stdout).toMatch(/config_path = '\/etc\/containerd\/certs\.d'/);
      expect(stdout).toMatch(/bin_dirs = \['\/usr\/lib\/cni'\]/);
      expect((await statInFs(root, "/usr/local/bin/runc"))?.type).toBe("regular");
      // Debian's runc 1.1 (out of upstream support) and containerd 1.7 are not installed.
      expect(await statInFs(root, "/usr/bin/runc")).toBeUndefined();
      expect(await statInFs(root, "/usr/bin/containerd")).toBeUndefined();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
