/**
 * The images bundle (`icn-bootstrap bundle`) and its push (`deploy --images --push-to`)
 * against a real registry (Debian's docker-registry on 127.0.0.1) with skopeo: a layout
 * made as the images stage makes one, the same bytes written twice, every image and extra
 * tag in the registry under its path with the bundle's digest, and what goes wrong named.
 */
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sha256File } from "../../common/hash.js";
import { UserError } from "../../builder/errors.js";
import { BUNDLE_IMAGES, pushImagesBundle, writeImagesBundle } from "../../builder/images-bundle.js";
import { freePort, startRegistry, type RegistryServer } from "../../builder/registry/server.js";
import { IMAGES_JSON, OCI_DIR } from "../../builder/stages/images.js";
import { makeImagesStage, type MiniImage } from "../helpers/images-stage.js";

let work: string;
let stageDir: string;
let registry: RegistryServer;
const images: MiniImage[] = [];

async function manifestDigest(ref: string): Promise<string> {
  const raw = await execa("skopeo", ["inspect", "--raw", "--tls-verify=false", `docker://${ref}`], { encoding: "buffer" });
  return `sha256:${createHash("sha256").update(raw.stdout).digest("hex")}`;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-bundle-test-"));
  stageDir = join(work, "images-stage");
  await mkdir(stageDir);
  images.push(...(await makeImagesStage(stageDir, join(work, "store"))));
  registry = await startRegistry(join(work, "registry"));
});

afterAll(async () => {
  await registry?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("images bundle", () => {
  it("holds the layout and the list of tags, the same bytes each time it is written", async () => {
    const [a, b] = [join(work, "a.tar"), join(work, "b.tar")];
    await writeImagesBundle(stageDir, a);
    await new Promise((r) => setTimeout(r, 1100)); // another second: a time in the tar would differ
    await writeImagesBundle(stageDir, b);
    expect(await sha256File(a)).toBe(await sha256File(b));
    const listed = (await execa("tar", ["-tvf", a])).stdout.split("\n");
    expect(listed.map((l) => l.split(/\s+/).pop())).toEqual(expect.arrayContaining(["oci-layout", "index.json", BUNDLE_IMAGES]));
    for (const line of listed) expect(line).toMatch(/ 1970-01-01 /);
    const unpacked = join(work, "unpacked");
    await mkdir(unpacked);
    await execa("tar", ["-xf", a, "-C", unpacked]);
    expect(JSON.parse(await readFile(join(unpacked, BUNDLE_IMAGES), "utf8"))).toEqual(images);
  });

  it("pushes every image and extra tag into a registry under the same path, digests unchanged", async () => {
    const bundle = join(work, "push.tar");
    await writeImagesBundle(stageDir, bundle);
    const lines: string[] = [];
    const pushed = await pushImagesBundle(bundle, { registry: registry.address, insecure: true, log: (m) => lines.push(m) });
    expect(pushed).toEqual(images);
    for (const image of images)
      for (const tag of [image.tag, ...image.tags]) expect(await manifestDigest(`${registry.address}/${image.repository}:${tag}`)).toBe(image.digest);
    expect(lines).toEqual([expect.stringMatching(/^1\/2 icn\/bpa:0\.1\.0,latest sha256:/), expect.stringMatching(/^2\/2 icn\/ironic:39\.0\.0 sha256:/)]);
    // Pushing again (an upgrade with the same bundle) changes nothing and does not fail.
    await pushImagesBundle(bundle, { registry: registry.address, insecure: true, log: () => undefined });
  });

  it("fails, naming the image, when a blob of the bundle changed after it was written", async () => {
    const copy = join(work, "tampered-stage");
    await execa("cp", ["-a", stageDir, copy]);
    const index = JSON.parse(await readFile(join(copy, OCI_DIR, "index.json"), "utf8")) as { manifests: { digest: string }[] };
    const manifest = JSON.parse(await readFile(join(copy, OCI_DIR, "blobs/sha256", index.manifests[0]!.digest.slice(7)), "utf8")) as {
      layers: { digest: string }[];
    };
    const layer = join(copy, OCI_DIR, "blobs/sha256", manifest.layers[0]!.digest.slice(7));
    const bytes = await readFile(layer);
    bytes[bytes.length - 1024]! ^= 0xff;
    await rm(layer);
    await writeFile(layer, bytes);
    const bundle = join(work, "tampered.tar");
    await writeImagesBundle(copy, bundle);
    const fresh = await startRegistry(join(work, "registry-fresh"));
    try {
      await expect(pushImagesBundle(bundle, { registry: fresh.address, insecure: true, log: () => undefined })).rejects.toThrow(
        /cannot push .*\/icn\/bpa:0\.1\.0: .*(digest|Digest)/,
      );
    } finally {
      await fresh.stop();
    }
  });

  it("names the registry that does not answer, and the fix", async () => {
    const bundle = join(work, "nowhere.tar");
    await writeImagesBundle(stageDir, bundle);
    const nowhere = `127.0.0.1:${await freePort()}`;
    await expect(pushImagesBundle(bundle, { registry: nowhere, insecure: true, log: () => undefined })).rejects.toThrow(
      new RegExp(`cannot push ${nowhere}/icn/bpa:0\\.1\\.0: .*`),
    );
  });

  it("refuses a registry over plain HTTP unless told it is one, and a file that is not a bundle", async () => {
    const bundle = join(work, "tls.tar");
    await writeImagesBundle(stageDir, bundle);
    const error = await pushImagesBundle(bundle, { registry: registry.address, log: () => undefined }).catch((e: Error) => e);
    expect(String(error)).toMatch(/cannot push .*(http response to HTTPS|server gave HTTP response)/i);
    expect((error as UserError).hint).toMatch(/--push-insecure/);
    expect(String(error)).not.toMatch(/level=fatal/);

    const notBundle = join(work, "not-a-bundle.tar");
    await execa("tar", ["-cf", notBundle, "-C", stageDir, IMAGES_JSON]);
    await expect(pushImagesBundle(notBundle, { registry: registry.address, insecure: true, log: () => undefined })).rejects.toThrow(/not an images bundle/);
    await expect(pushImagesBundle(join(work, "missing.tar"), { registry: registry.address, insecure: true, log: () => undefined })).rejects.toThrow(
      /does not exist/,
    );
  });
});
