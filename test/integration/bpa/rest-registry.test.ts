/**
 * Container image uploads through the real registry: the API (in-process, against the
 * real kube-apiserver) reads the push credentials and CA from the cluster and pushes
 * through the shipped nginx + docker-registry configuration; skopeo pulls the image back
 * by digest over TLS, as a compute node's containerd would. OCI layouts and `docker save`
 * archives; a shipped tag refused; a tar that is no image refused; nothing half-pushed
 * under the tag. Names in the registry belong to whoever published them (issue 48): the
 * build's repositories to nobody, a chart to the uploader who published it, also when two
 * uploads race for it.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { c as tarCreate } from "tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningApi } from "../../../bpa/rest/main.js";
import type { UploadRecord } from "../../../common/uploads.js";
import { REPO } from "../../helpers/cli.js";
import { dockerSaveArchive } from "../../helpers/docker-save.js";
import { startRegistryFront, type RegistryFront } from "../../helpers/registry-front.js";
import { clients, kubeConfig } from "../../helpers/operator-suite.js";
import { ApiClient, createRegistryAccess, startApiFixture, type ApiFixture, tokenFor, type TestTls, uploaderClient } from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
const root = process.getuid?.() === 0;
const digestOf = (data: Buffer | string) => `sha256:${createHash("sha256").update(data).digest("hex")}`;

/** An OCI image layout with one image of one random "layer"; returns the manifest digest and layer. */
async function ociLayout(dir: string, layerBytes: number): Promise<{ digest: string; layer: Buffer }> {
  await mkdir(join(dir, "blobs/sha256"), { recursive: true });
  const put = async (data: Buffer | string) => {
    const digest = digestOf(data);
    await writeFile(join(dir, "blobs/sha256", digest.slice(7)), data);
    return { digest, size: Buffer.byteLength(data) };
  };
  const layer = randomBytes(layerBytes);
  const l = await put(layer);
  const config = await put(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [l.digest] } }));
  const manifest = await put(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...l }],
    }),
  );
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await writeFile(
    join(dir, "index.json"),
    JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", ...manifest }] }),
  );
  return { digest: manifest.digest, layer };
}

describe.runIf(root)("container image uploads into the appliance's registry", () => {
  let fixture: ApiFixture;
  let work: string;
  let registry: RegistryFront;
  let api: RunningApi;
  let ns: string;
  let tls: TestTls;
  let uploader: ApiClient;

  beforeAll(async () => {
    registry = await startRegistryFront();
    const front = registry;
    const env: Record<string, string> = { BPA_API_REGISTRY_URL: `https://${front.address}`, BPA_API_PULL_HOST: front.address };
    fixture = await startApiFixture(kc, c, "rest-registry", {
      env,
      // What the appliance's first boot creates: the push credentials and the site CA.
      prepare: async (namespace) => {
        Object.assign(env, await createRegistryAccess(c, namespace, { username: front.username, password: front.password, ca: front.ca }));
      },
    });
    ({ ns, work, tls, api } = fixture);
    uploader = new ApiClient(`https://127.0.0.1:${api.port}`, tls.ca, await tokenFor(c, ns, "bpa-api-uploader"));
  }, 120_000);

  afterAll(async () => {
    await fixture?.stop();
    await registry?.stop();
  });

  const skopeo = async (args: string[]) => {
    const r = await execa("skopeo", args, { reject: false, all: true, timeout: 120_000 });
    return { ok: r.exitCode === 0, output: String(r.all ?? "") };
  };

  it("pushes an OCI layout archive under the name given; skopeo pulls it back by digest over TLS, byte for byte", async () => {
    const layout = join(work, "layout");
    const { digest, layer } = await ociLayout(layout, 3 * 1024 * 1024);
    const archive = join(work, "app.oci.tar");
    await tarCreate({ cwd: layout, file: archive, portable: true }, ["oci-layout", "index.json", "blobs"]);
    const reply = await uploader.upload("container-image", "site/app:1.0", await readFile(archive));
    expect(reply.status, reply.body).toBe(200);
    const record = JSON.parse(reply.body) as UploadRecord;
    expect(record).toMatchObject({ state: "published", kind: "container-image", name: "site/app:1.0", digest, url: `${registry.address}/site/app@${digest}` });

    const byDigest = await skopeo(["inspect", "--cert-dir", registry.certDir, "--format", "{{.Digest}}", `docker://${record.url}`]);
    expect(byDigest.output.trim()).toBe(digest);
    const byTag = await skopeo(["inspect", "--cert-dir", registry.certDir, "--format", "{{.Digest}}", `docker://${registry.address}/site/app:1.0`]);
    expect(byTag.output.trim()).toBe(digest);
    const pulled = join(work, "pulled");
    const copy = await skopeo(["copy", "--src-cert-dir", registry.certDir, `docker://${record.url}`, `dir:${pulled}`]);
    expect(copy.ok, copy.output).toBe(true);
    expect((await readFile(join(pulled, digestOf(layer).slice(7)))).equals(layer)).toBe(true);
  });

  it("publishes a Helm chart upload as Helm's OCI artifact under its name and version; a chart under another name is refused", async () => {
    const src = join(work, "chart-src");
    await mkdir(join(src, "site-app/templates"), { recursive: true });
    await writeFile(join(src, "site-app/Chart.yaml"), "apiVersion: v2\nname: site-app\nversion: 0.2.0\n");
    await writeFile(join(src, "site-app/templates/cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: site-app }\n");
    const tgz = join(work, "site-app-0.2.0.tgz");
    await tarCreate({ cwd: src, file: tgz, gzip: true, portable: true }, ["site-app"]);
    const bytes = await readFile(tgz);
    const reply = await uploader.upload("chart", "charts/site-app:0.2.0", bytes);
    expect(reply.status, reply.body).toBe(200);
    const record = JSON.parse(reply.body) as UploadRecord;
    expect(record).toMatchObject({
      state: "published",
      kind: "chart",
      name: "charts/site-app:0.2.0",
      version: "0.2.0",
      url: `oci://${registry.address}/charts/site-app`,
    });
    // What Helm pulls: an OCI manifest, the chart's metadata as Helm's config, the .tgz byte for byte as its one layer.
    const raw = await skopeo(["inspect", "--raw", "--cert-dir", registry.certDir, `docker://${registry.address}/charts/site-app:0.2.0`]);
    expect(raw.ok, raw.output).toBe(true);
    const manifest = JSON.parse(raw.output) as { config: { mediaType: string }; layers: { mediaType: string; digest: string }[] };
    expect(manifest.config.mediaType).toBe("application/vnd.cncf.helm.config.v1+json");
    expect(manifest.layers).toEqual([expect.objectContaining({ mediaType: "application/vnd.cncf.helm.chart.content.v1.tar+gzip", digest: digestOf(bytes) })]);
    expect(digestOf(raw.output)).toBe(record.digest);

    const refused = await uploader.upload("chart", "charts/other:0.2.0", bytes);
    expect(refused.status).toBe(422);
    expect(refused.body).toContain('the chart is named "site-app" but would be published as charts/other');
  });

  it("pushes a docker save archive (uncompressed layers) with the icn-bootstrap upload command", async () => {
    const { archive, layerDigest } = await dockerSaveArchive(work, "hello", { "hello.txt": "hello from docker save\n" });
    await writeFile(join(work, "api-ca.crt"), tls.ca);

    const cli = await execa(
      process.execPath,
      [
        "--import",
        "tsx",
        "builder/cli.ts",
        "upload",
        archive,
        "--kind",
        "container-image",
        "--name",
        "site/hello:1",
        "--server",
        uploader.base,
        "--cacert",
        join(work, "api-ca.crt"),
      ],
      { cwd: REPO, reject: false, env: { ICN_BPA_TOKEN: uploader.token!, XDG_STATE_HOME: join(work, "xdg") } },
    );
    expect(cli.exitCode, `${cli.stdout}\n${cli.stderr}`).toBe(0);
    expect(cli.stderr).toMatch(/site\/hello:1: 100\.0%/);
    const record = JSON.parse(cli.stdout) as UploadRecord;
    expect(record).toMatchObject({ state: "published", name: "site/hello:1" });
    const inspect = await skopeo(["inspect", "--cert-dir", registry.certDir, "--config", `docker://${record.url}`]);
    expect(inspect.ok, inspect.output).toBe(true);
    expect(JSON.parse(inspect.output).rootfs.diff_ids).toEqual([layerDigest]);
    const raw = await skopeo(["inspect", "--cert-dir", registry.certDir, "--raw", `docker://${record.url}`]);
    expect(JSON.parse(raw.output).layers[0]).toMatchObject({ digest: layerDigest, mediaType: "application/vnd.oci.image.layer.v1.tar" });
  });

  it("a shipped tag is refused by the registry: the upload fails naming it, and the shipped image stays", async () => {
    const layout = join(work, "shipped");
    const shipped = await ociLayout(layout, 4096);
    const archive = join(work, "shipped.tar");
    await tarCreate({ cwd: layout, file: archive }, ["oci-layout", "index.json", "blobs"]);
    expect((await uploader.upload("container-image", "pause:3.10.2", await readFile(archive))).status).toBe(200);
    await registry.setShippedTags([{ repository: "pause", tag: "3.10.2", tags: [], digest: shipped.digest }]);

    const other = join(work, "other");
    await ociLayout(other, 4096);
    const otherArchive = join(work, "other.tar");
    await tarCreate({ cwd: other, file: otherArchive }, ["oci-layout", "index.json", "blobs"]);
    const refused = await uploader.upload("container-image", "pause:3.10.2", await readFile(otherArchive));
    expect(refused.status).toBe(502);
    expect(refused.body).toContain(`refused manifest pause:3.10.2 (HTTP 403): DENIED: pause:3.10.2 is shipped with this appliance at ${shipped.digest}`);
    const now = await skopeo(["inspect", "--cert-dir", registry.certDir, "--format", "{{.Digest}}", `docker://${registry.address}/pause:3.10.2`]);
    expect(now.output.trim()).toBe(shipped.digest);
  });

  it("refuses an archive that is no image (422), pushing nothing", async () => {
    const notImage = join(work, "not-image");
    await mkdir(notImage, { recursive: true });
    await writeFile(join(notImage, "README"), "just a file\n");
    const archive = join(work, "not-image.tar");
    await tarCreate({ cwd: notImage, file: archive }, ["README"]);
    const reply = await uploader.upload("container-image", "site/nothing:1", await readFile(archive));
    expect(reply.status).toBe(422);
    expect(reply.body).toContain("has neither index.json (OCI layout) nor manifest.json (docker save)");
    const garbage = await uploader.upload("container-image", "site/nothing:1", randomBytes(5000));
    expect(garbage.status).toBe(422);
    expect(garbage.body).toContain("is not a tar archive");
    const tags = await skopeo(["list-tags", "--cert-dir", registry.certDir, `docker://${registry.address}/site/nothing`]);
    expect(tags.ok).toBe(false);
  });

  it("refuses a docker save archive whose manifest names files out of the archive, or links: the server's own files are never pushed", async () => {
    const dir = join(work, "escape");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "config.json"), "{}");
    await writeFile(join(dir, "manifest.json"), JSON.stringify([{ Config: "config.json", RepoTags: ["x:1"], Layers: ["../../../../../../etc/hostname"] }]));
    const archive = join(work, "escape.tar");
    await tarCreate({ cwd: dir, file: archive }, ["manifest.json", "config.json"]);
    const reply = await uploader.upload("container-image", "site/escape:1", await readFile(archive));
    expect(reply.status).toBe(422);
    expect(reply.body).toContain('names "../../../../../../etc/hostname", which is not a file of the archive');

    // A layer that is a symbolic link to a file of the server: not unpacked, so the blob is missing.
    const linked = join(work, "linked");
    await mkdir(join(linked, "layer"), { recursive: true });
    await writeFile(join(linked, "config.json"), "{}");
    await execa("ln", ["-s", "/etc/hostname", join(linked, "layer/layer.tar")]);
    await writeFile(join(linked, "manifest.json"), JSON.stringify([{ Config: "config.json", RepoTags: ["x:1"], Layers: ["layer/layer.tar"] }]));
    const linkedArchive = join(work, "linked.tar");
    await tarCreate({ cwd: linked, file: linkedArchive }, ["manifest.json", "config.json", "layer"]);
    const refused = await uploader.upload("container-image", "site/escape:2", await readFile(linkedArchive));
    expect(refused.status).toBe(422);
    expect(refused.body).toContain('the docker save archive lacks "layer/layer.tar"');
    for (const name of ["site/escape"]) {
      expect((await skopeo(["list-tags", "--cert-dir", registry.certDir, `docker://${registry.address}/${name}`])).ok).toBe(false);
    }
  });

  /** A packaged chart (helm package's layout); `note` changes its bytes. */
  async function chartTgz(name: string, version: string | undefined, note: string): Promise<Buffer> {
    const src = join(work, `chart-${name}-${note}`);
    await mkdir(join(src, name, "templates"), { recursive: true });
    await writeFile(join(src, name, "Chart.yaml"), `apiVersion: v2\nname: ${name}\nversion: ${version ?? "1.0.0"}\n`);
    await writeFile(join(src, name, "templates/cm.yaml"), `apiVersion: v1\nkind: ConfigMap\nmetadata: { name: ${name} }\ndata: { note: ${note} }\n`);
    const tgz = join(work, `${name}-${note}.tgz`);
    await tarCreate({ cwd: src, file: tgz, gzip: true, portable: true }, [name]);
    return readFile(tgz);
  }

  const tagDigest = async (reference: string) =>
    (await skopeo(["inspect", "--raw", "--cert-dir", registry.certDir, `docker://${registry.address}/${reference}`])).output;

  it("the build's repositories: a tag shipped with the appliance, and a new tag in its repository, are refused at creation naming the build", async () => {
    const layout = join(work, "base");
    const { digest } = await ociLayout(layout, 4096);
    // Seeded as the build seeds the registry: skopeo, the push account.
    const seeded = await skopeo([
      "copy",
      "--dest-cert-dir",
      registry.certDir,
      "--dest-creds",
      `${registry.username}:${registry.password}`,
      `oci:${layout}`,
      `docker://${registry.address}/shipped/base:1.0`,
    ]);
    expect(seeded.ok, seeded.output).toBe(true);
    await registry.setShippedTags([{ repository: "shipped/base", tag: "1.0", tags: [], digest }]);
    const alice = await uploaderClient(c, fixture, "alice-shipped", true);
    for (const name of ["shipped/base:1.0", "shipped/base:2.0"]) {
      const refused = await alice.create({ kind: "container-image", name, sha256: "a".repeat(64) }, 4096);
      expect(refused.status, refused.body).toBe(409);
      expect(refused.body).toContain(
        `container-image "${name}" belongs to the build: repository shipped/base, shipped with the appliance (its registry holds 1.0, not uploaded through this API)`,
      );
    }
    expect(await readdir(join(work, "state", "incoming"))).toEqual([]);
  });

  it("a chart: another uploader's re-upload is refused at creation naming the first; the first replaces it", async () => {
    const alice = await uploaderClient(c, fixture, "alice");
    const bob = await uploaderClient(c, fixture, "bob");
    const first = await alice.upload("chart", "charts/shared-app:1.0.0", await chartTgz("shared-app", "1.0.0", "first"));
    expect(first.status, first.body).toBe(200);
    const published = JSON.parse(first.body) as UploadRecord;

    const theirs = await chartTgz("shared-app", "1.0.0", "theirs");
    const refused = await bob.create({ kind: "chart", name: "charts/shared-app:1.0.0", sha256: digestOf(theirs).slice(7) }, theirs.length);
    expect(refused.status, refused.body).toBe(409);
    expect(refused.body).toContain(`chart "charts/shared-app:1.0.0" was published by system:serviceaccount:${ns}:alice (upload ${published.id})`);
    expect(digestOf(await tagDigest("charts/shared-app:1.0.0"))).toBe(published.digest);

    const again = await alice.upload("chart", "charts/shared-app:1.0.0", await chartTgz("shared-app", "1.0.0", "second"));
    expect(again.status, again.body).toBe(200);
    expect(digestOf(await tagDigest("charts/shared-app:1.0.0"))).toBe((JSON.parse(again.body) as UploadRecord).digest);
  });

  it("two uploads racing for one chart version (one named without it): the second to be published is refused, naming the first", async () => {
    const alice = await uploaderClient(c, fixture, "alice-race");
    const bob = await uploaderClient(c, fixture, "bob-race");
    const hers = await chartTgz("race-app", "1.0.0", "hers");
    const his = await chartTgz("race-app", "1.0.0", "his");
    // Her name has no version (read from the chart when it is published): both are taken at creation.
    const created = await alice.create({ kind: "chart", name: "charts/race-app", sha256: digestOf(hers).slice(7) }, hers.length);
    expect(created.status, created.body).toBe(201);
    const won = await bob.upload("chart", "charts/race-app:1.0.0", his);
    expect(won.status, won.body).toBe(200);
    const lost = await alice.patch(String(created.headers.location), 0, hers);
    expect(lost.status, lost.body).toBe(409);
    expect(lost.body).toContain(`chart "charts/race-app" was published by system:serviceaccount:${ns}:bob-race`);
    expect(digestOf(await tagDigest("charts/race-app:1.0.0"))).toBe((JSON.parse(won.body) as UploadRecord).digest);
  });
});
