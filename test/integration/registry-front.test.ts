/**
 * The appliance's registry configuration, run on this host with the real programs:
 * docker-registry with the shipped config.yml (its unix socket, its storage on a small
 * tmpfs), nginx with the shipped icn-bootstrap-registry.conf (only paths and the ports
 * changed), skopeo as the client. Fast checks of what the boot test shows in a VM, plus
 * what a VM cannot easily show: a push that fills the disk leaves the stored images intact.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadSeedLists, parseRef, seedListPath } from "../../builder/images/seed.js";
import { startRegistryFront, type RegistryFront } from "../helpers/registry-front.js";

const root = process.getuid?.() === 0;
const sha256 = (data: Buffer | string) => `sha256:${createHash("sha256").update(data).digest("hex")}`;

/** An OCI layout with one image of one layer of `layerBytes` random bytes (the registry does not look inside layers). */
async function writeImage(dir: string, ref: string, layerBytes: number): Promise<string> {
  await mkdir(join(dir, "blobs/sha256"), { recursive: true });
  const put = async (data: Buffer | string) => {
    const digest = sha256(data);
    await writeFile(join(dir, "blobs/sha256", digest.slice(7)), data);
    return { digest, size: Buffer.byteLength(data) };
  };
  const layer = await put(randomBytes(layerBytes));
  const config = await put(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [layer.digest] } }));
  const manifest = JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
    // Declared compressed, so that skopeo pushes it as it is (it compresses plain tar layers, changing digests).
    layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...layer }],
  });
  const m = await put(manifest);
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await writeFile(
    join(dir, "index.json"),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", ...m, annotations: { "org.opencontainers.image.ref.name": ref } }],
    }),
  );
  return m.digest;
}

async function skopeo(args: string[]) {
  const result = await execa("skopeo", args, { reject: false, all: true, timeout: 120_000 });
  return { ok: result.exitCode === 0, output: String(result.all ?? "") };
}

describe.runIf(root)("the registry behind nginx, with the shipped configuration", () => {
  let front: RegistryFront;
  let work: string;
  let storage: string;
  let address: string;
  let loopback: string;
  let certs: string;
  let creds: string;
  let seededDigest: string;

  beforeAll(async () => {
    // The shipped docker-registry and nginx configuration, the site's PKI and credentials as
    // the first boot makes them, storage on a 24 MiB tmpfs (test/helpers/registry-front.ts).
    front = await startRegistryFront({ storageSize: "24m" });
    ({ work, storage, address, loopback } = front);
    certs = front.certDir;
    creds = `${front.username}:${front.password}`;

    // The image "shipped" with the appliance: pushed, then its tag made immutable as the build does.
    const layout = join(work, "shipped");
    seededDigest = await writeImage(layout, "pause:3.10.2", 1024 * 1024);
    const seed = await skopeo([
      "copy",
      "--preserve-digests",
      "--dest-cert-dir",
      certs,
      "--dest-creds",
      creds,
      `oci:${layout}:pause:3.10.2`,
      `docker://${address}/pause:3.10.2`,
    ]);
    expect(seed.ok, seed.output).toBe(true);
    // The rules for every image the default appliance ships (long keys: nginx must load them), plus this one.
    const shippedImages = (await loadSeedLists([seedListPath("bootstrap.yaml")])).filter((i) => i.digest && i.ref !== "registry.k8s.io/pause:3.10.2");
    const rules = shippedImages.map((i) => ({ ...parseRef(i.ref), tags: i.tags ?? [], digest: i.digest! }));
    expect(rules.map((r) => r.repository)).toContain("kube-controller-manager");
    await front.setShippedTags([...rules, { repository: "pause", tag: "3.10.2", tags: [], digest: seededDigest }]);
  }, 120_000);

  afterAll(async () => {
    await front?.stop();
  });

  const inspect = async (ref: string) =>
    (await skopeo(["inspect", "--cert-dir", certs, "--format", "{{.Digest}}", `docker://${address}/${ref}`])).output.trim();

  it("serves anonymous pulls over TLS, verified with the CA; plain HTTP gets 400", async () => {
    expect(await inspect("pause:3.10.2")).toBe(seededDigest);
    expect((await skopeo(["inspect", `docker://${address}/pause:3.10.2`])).output).toMatch(/x509: certificate signed by unknown authority/);
    const plain = await fetch(`http://${address}/v2/_catalog`);
    expect(plain.status).toBe(400);
  });

  it("serves the appliance's own pulls over plain HTTP on loopback, and nothing but reads there", async () => {
    const pull = await skopeo(["copy", "--src-tls-verify=false", `docker://${loopback}/pause:3.10.2`, `dir:${join(work, "pulled-loopback")}`]);
    expect(pull.ok, pull.output).toBe(true);
    expect((await skopeo(["inspect", "--tls-verify=false", "--format", "{{.Digest}}", `docker://${loopback}/pause:3.10.2`])).output.trim()).toBe(seededDigest);
    const layout = join(work, "loopback-push");
    await writeImage(layout, "x:1", 4096);
    // Even with the push credentials: this door has no writes.
    const push = await skopeo(["copy", "--dest-tls-verify=false", "--dest-creds", creds, `oci:${layout}:x:1`, `docker://${loopback}/loopback/x:1`]);
    expect(push.ok).toBe(false);
    for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
      const raw = await execa("curl", [
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-u",
        creds,
        "-X",
        method,
        `http://${loopback}/v2/loopback/x/blobs/uploads/`,
      ]);
      expect(raw.stdout, method).toBe("403");
    }
    expect(await readdir(join(storage, "docker/registry/v2/repositories"))).toEqual(["pause"]);
  });

  it("refuses anonymous and wrongly authenticated writes with 401, writing nothing", async () => {
    const layout = join(work, "intruder");
    await writeImage(layout, "x:1", 4096);
    for (const extra of [[], ["--dest-creds", "icn-push:wrong"]]) {
      const push = await skopeo(["copy", "--dest-cert-dir", certs, ...extra, `oci:${layout}:x:1`, `docker://${address}/intruder/x:1`]);
      expect(push.ok).toBe(false);
      expect(push.output).toMatch(/unauthorized|authentication required/);
    }
    expect(await readdir(join(storage, "docker/registry/v2/repositories"))).toEqual(["pause"]);
    const raw = await execa("curl", [
      "-s",
      "-o",
      "/dev/null",
      "-w",
      "%{http_code}",
      "--cacert",
      join(certs, "ca.crt"),
      "-X",
      "DELETE",
      `https://${address}/v2/pause/manifests/${seededDigest}`,
    ]);
    expect(raw.stdout).toBe("401");
  });

  it("takes authenticated pushes of new tags, but never over a shipped one (403 naming it and its digest)", async () => {
    const layout = join(work, "site");
    const digest = await writeImage(layout, "site:1", 4096);
    expect(
      (await skopeo(["copy", "--preserve-digests", "--dest-cert-dir", certs, "--dest-creds", creds, `oci:${layout}:site:1`, `docker://${address}/pause:site`]))
        .ok,
    ).toBe(true);
    expect(await inspect("pause:site")).toBe(digest);
    const swap = await skopeo([
      "copy",
      "--preserve-digests",
      "--dest-cert-dir",
      certs,
      "--dest-creds",
      creds,
      `oci:${layout}:site:1`,
      `docker://${address}/pause:3.10.2`,
    ]);
    expect(swap.ok).toBe(false);
    expect(swap.output).toContain(`denied: pause:3.10.2 is shipped with this appliance at ${seededDigest}`);
    expect(await inspect("pause:3.10.2")).toBe(seededDigest);
  });

  it("a push that fills the disk fails, and the stored images stay intact and pullable", async () => {
    const layout = join(work, "huge");
    await writeImage(layout, "huge:1", 40 * 1024 * 1024); // more than the 24 MiB tmpfs holds
    const push = await skopeo([
      "copy",
      "--preserve-digests",
      "--dest-cert-dir",
      certs,
      "--dest-creds",
      creds,
      `oci:${layout}:huge:1`,
      `docker://${address}/site/huge:1`,
    ]);
    expect(push.ok).toBe(false);
    expect(await inspect("pause:3.10.2")).toBe(seededDigest);
    // Every blob of the shipped image still has its digest: a full copy verifies them.
    const copy = await skopeo(["copy", "--src-cert-dir", certs, `docker://${address}/pause:3.10.2`, `dir:${join(work, "pulled")}`]);
    expect(copy.ok, copy.output).toBe(true);
    expect(await inspect("site/huge:1")).not.toMatch(/^sha256:/);
  });
});

/** A push of a small image to REF as USER (a password of the front's file, or a wrong one). */
async function pushAs(front: RegistryFront, user: string, ref: string, password = front.accounts[user]!) {
  const layout = join(front.work, `push-${randomBytes(4).toString("hex")}`);
  await writeImage(layout, "x:1", 4096);
  return skopeo([
    "copy",
    "--preserve-digests",
    "--dest-cert-dir",
    front.certDir,
    "--dest-creds",
    `${user}:${password}`,
    `oci:${layout}:x:1`,
    `docker://${front.address}/${ref}`,
  ]);
}

describe.runIf(root)("the registry accounts: the REST API's writes to no repository the build ships", () => {
  for (const flavor of ["appliance", "chart"] as const) {
    describe(flavor === "appliance" ? "the appliance's registry" : "the chart's own registry (serve.registry)", () => {
      let front: RegistryFront;
      beforeAll(async () => {
        front = await startRegistryFront({ flavor });
        await front.setShippedTags([
          { repository: "icn/bpa", tag: "0.1.0", tags: ["latest"] },
          { repository: "charts/multus", tag: "4.3.0", tags: [] },
        ]);
      }, 120_000);
      afterAll(async () => {
        await front?.stop();
      });

      it("the REST API's account (icn-api) is refused every repository the build ships, new tags included, and publishes elsewhere", async () => {
        for (const ref of ["icn/bpa:upload", "charts/multus:9.9.9"]) {
          const refused = await pushAs(front, "icn-api", ref);
          expect(refused.ok, ref).toBe(false);
          expect(refused.output).toContain(`denied: ${ref.split(":")[0]} is a repository the ${flavor === "chart" ? "bundle" : "appliance"} ships`);
        }
        expect((await pushAs(front, "icn-api", "site/app:1.0")).ok).toBe(true);
        // A repository whose name only begins like a shipped one is not one.
        expect((await pushAs(front, "icn-api", "icn/bpa-site:1.0")).ok).toBe(true);
        expect((await pushAs(front, "icn-api", "icn/bpa/site:1.0")).ok).toBe(true);
        // Another account's name with the API's password is no way around it.
        const claimed = await pushAs(front, "icn-push", "icn/bpa:claimed", front.accounts["icn-api"]);
        expect(claimed.ok).toBe(false);
        expect(claimed.output).toMatch(/unauthorized|authentication required/);
      });

      it("no account moves a shipped tag; the push account pushes new tags into shipped repositories", async () => {
        if (flavor === "chart") expect((await pushAs(front, "icn-seed", "icn/bpa:latest")).ok).toBe(true);
        const moved = await pushAs(front, "icn-push", "icn/bpa:latest");
        expect(moved.ok).toBe(false);
        expect(moved.output).toContain(`denied: icn/bpa:latest is shipped with ${flavor === "chart" ? "the chart's bundle" : "this appliance"}`);
        expect((await pushAs(front, "icn-api", "icn/bpa:0.1.0")).ok).toBe(false);
        expect((await pushAs(front, "icn-push", "icn/bpa:admin")).ok).toBe(true);
      });

      if (flavor === "chart")
        it("only the seeding account (deploy --images, a password of that deploy) sets a shipped tag, and only with its password", async () => {
          expect((await pushAs(front, "icn-seed", "charts/multus:4.3.0")).ok).toBe(true);
          const wrong = await pushAs(front, "icn-seed", "charts/multus:4.3.0", "not-the-password");
          expect(wrong.ok).toBe(false);
          expect(wrong.output).toMatch(/unauthorized|authentication required/);
        });
    });
  }
});
