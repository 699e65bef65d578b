/**
 * Container image archives an uploader could exhaust the REST API with (bpa/rest/push-image.ts):
 * JSON documents over the cap, an archive that unpacks to more than its size, indexes that
 * name their children many times or nest too deep, too many manifests. Refusals happen
 * before anything reaches the registry; what is pushed goes to a real docker-registry, each
 * manifest once.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { c as tarCreate } from "tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRegistry, type RegistryServer } from "../../../builder/registry/server.js";
import { pushImageArchive } from "../../../bpa/rest/push-image.js";
import { RegistryClient } from "../../../bpa/rest/registry.js";

const MiB = 1024 * 1024;
const OCI_INDEX = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const digestOf = (data: Buffer | string) => `sha256:${createHash("sha256").update(data).digest("hex")}`;

let work: string;
let registry: RegistryServer;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-push-image-"));
  registry = await startRegistry(join(work, "registry"));
});
afterAll(async () => {
  await registry?.stop();
  await rm(work, { recursive: true, force: true });
});

/** Refuses every call: the checks must stop a bad archive before anything reaches the registry. */
const noRegistry = new Proxy({} as RegistryClient, {
  get: () => () => {
    throw new Error("the registry was called");
  },
});

/** The real registry, counting the manifests pushed. */
class CountingRegistry extends RegistryClient {
  manifests = 0;
  override async pushManifest(repository: string, reference: string, mediaType: string, bytes: Buffer): Promise<string> {
    this.manifests++;
    return super.pushManifest(repository, reference, mediaType, bytes);
  }
}

/** An OCI image layout being written in `dir`: blobs by digest, index.json last. */
async function layout(dir: string) {
  await mkdir(join(dir, "blobs/sha256"), { recursive: true });
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  const put = async (data: Buffer | string, mediaType: string) => {
    const digest = digestOf(data);
    await writeFile(join(dir, "blobs/sha256", digest.slice(7)), data);
    return { mediaType, digest, size: Buffer.byteLength(data) };
  };
  const image = async (padding = "") => {
    const layer = await put(randomBytes(1024), "application/vnd.oci.image.layer.v1.tar+gzip");
    const config = await put(
      JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [layer.digest] } }),
      "application/vnd.oci.image.config.v1+json",
    );
    return put(
      JSON.stringify({ schemaVersion: 2, mediaType: OCI_MANIFEST, config, layers: [layer], ...(padding ? { annotations: { padding } } : {}) }),
      OCI_MANIFEST,
    );
  };
  const index = (children: { mediaType: string; digest: string; size: number }[]) =>
    put(JSON.stringify({ schemaVersion: 2, mediaType: OCI_INDEX, manifests: children }), OCI_INDEX);
  const top = (d: { mediaType: string; digest: string; size: number }) =>
    writeFile(join(dir, "index.json"), JSON.stringify({ schemaVersion: 2, manifests: [d] }));
  return { put, image, index, top };
}

async function archive(name: string, make: (dir: string) => Promise<void>, gzip = false): Promise<string> {
  const dir = join(work, name);
  await make(dir);
  const file = join(work, `${name}.tar`);
  await tarCreate({ file, cwd: dir, gzip, portable: true }, await readdir(dir));
  await rm(dir, { recursive: true, force: true });
  return file;
}

const push = (file: string, client: RegistryClient = noRegistry, name = "limits/app:1") =>
  pushImageArchive(file, join(work, `unpack-${randomBytes(4).toString("hex")}`), name, client, registry.address);

describe("the caps on what an image archive makes the API read", () => {
  it("refuses a docker save manifest.json over 4 MiB by its size, naming it and the cap", async () => {
    const file = await archive("big-manifest-json", async (dir) => {
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "manifest.json"), JSON.stringify([{ Config: "c.json", Layers: [], padding: "a".repeat(5 * MiB) }]));
    });
    await expect(push(file)).rejects.toThrow(
      /the image archive's manifest\.json is 5\.0 MiB \(\d+ bytes\), over the 4\.0 MiB this API reads of a JSON document/,
    );
  });

  it("refuses a manifest blob over 4 MiB by its size, naming its digest and the cap", async () => {
    let digest = "";
    const file = await archive("big-manifest-blob", async (dir) => {
      const l = await layout(dir);
      const big = await l.image("a".repeat(5 * MiB));
      digest = big.digest;
      await l.top(big);
    });
    await expect(push(file)).rejects.toThrow(`the image archive's manifest ${digest} is 5.0 MiB`);
  });

  it("refuses an archive that unpacks to more than its own size (a gzip bomb) at once, naming why", async () => {
    const file = await archive(
      "bomb",
      async (dir) => {
        const l = await layout(dir);
        await l.top(await l.image());
        await writeFile(join(dir, "blobs", "filler"), Buffer.alloc(256 * MiB));
      },
      true,
    );
    const started = Date.now();
    await expect(push(file)).rejects.toThrow(/the container image archive unpacks to more than its own \d+ bytes/);
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe("image indexes", () => {
  it("pushes a manifest named many times once: indexes naming their child 10 times, 3 deep, are 4 manifest pushes, not 1,111", async () => {
    let top = "";
    const file = await archive("fan-out", async (dir) => {
      const l = await layout(dir);
      let child = await l.image();
      for (let level = 0; level < 3; level++) child = await l.index(Array.from({ length: 10 }, () => child));
      top = child.digest;
      await l.top(child);
    });
    const client = new CountingRegistry({ url: registry.url, username: "", password: "" });
    const pushed = await push(file, client, "fan/out:1");
    expect(pushed.digest).toBe(top);
    expect(client.manifests).toBe(4);
    const tagged = await fetch(`${registry.url}/v2/fan/out/manifests/1`, { method: "HEAD", headers: { accept: OCI_INDEX } });
    expect(tagged.headers.get("docker-content-digest")).toBe(top);
  });

  it("refuses indexes nested more than 4 deep, naming the cap, pushing nothing", async () => {
    const file = await archive("deep", async (dir) => {
      const l = await layout(dir);
      let child = await l.image();
      for (let level = 0; level < 5; level++) child = await l.index([child]);
      await l.top(child);
    });
    await expect(push(file)).rejects.toThrow(/the image archive nests image indexes more than 4 deep \(index sha256:[0-9a-f]{64}\)/);
  });

  it("refuses more than 256 distinct manifests, naming the cap, pushing nothing", async () => {
    const file = await archive("many", async (dir) => {
      const l = await layout(dir);
      const config = await l.put("{}", "application/vnd.oci.image.config.v1+json");
      const children = [];
      for (let i = 0; i < 257; i++) {
        children.push(
          await l.put(JSON.stringify({ schemaVersion: 2, mediaType: OCI_MANIFEST, config, layers: [], annotations: { n: String(i) } }), OCI_MANIFEST),
        );
      }
      await l.top(await l.index(children));
    });
    await expect(push(file)).rejects.toThrow("the image archive has more than 256 distinct manifests: this API pushes at most 256 per upload");
  });
});
