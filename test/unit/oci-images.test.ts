import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UserError } from "../../builder/errors.js";
import { planImages } from "../../builder/images/plan.js";
import { loadSeedLists, selectImages, writeDigests } from "../../builder/images/seed.js";
import { fileEntries, writeLayer } from "../../builder/oci/layer.js";
import { indexTar, normalizeEntries, writeTar, type TarEntry } from "../../builder/oci/tar.js";
import { runStage } from "../../builder/stage.js";
import { imagesStage } from "../../builder/stages/images.js";

let dir: string;
const previousCache = process.env.ICN_BOOTSTRAP_CACHE;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "icn-oci-"));
  process.env.ICN_BOOTSTRAP_CACHE = join(dir, "cache");
});
afterAll(async () => {
  if (previousCache === undefined) delete process.env.ICN_BOOTSTRAP_CACHE;
  else process.env.ICN_BOOTSTRAP_CACHE = previousCache;
  await rm(dir, { recursive: true, force: true });
});

async function tarBytes(entries: TarEntry[]): Promise<Buffer> {
  const { PassThrough } = await import("node:stream");
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on("data", (c: Buffer) => chunks.push(c));
  await writeTar(entries, out);
  out.end();
  return Buffer.concat(chunks);
}

describe("deterministic tar layers", () => {
  it("writes the same bytes whatever the order and mtimes of the sources, and GNU tar reads them back", async () => {
    const src = join(dir, "src");
    await mkdir(join(src, "b/deep"), { recursive: true });
    await writeFile(join(src, "b/deep/file.txt"), "hello\n");
    await writeFile(join(src, "a.sh"), "#!/bin/sh\n", { mode: 0o755 });
    const long = `${"x".repeat(120)}/${"y".repeat(120)}.txt`;
    await mkdir(join(src, "x".repeat(120)), { recursive: true });
    await writeFile(join(src, long), "long path\n");
    await symlink("a.sh", join(src, "link"));
    const first = await tarBytes(await fileEntries([{ from: src, to: "/opt/app" }]));
    await execa("touch", ["-d", "2001-01-01", join(src, "a.sh"), join(src, "b/deep/file.txt")]);
    const second = await tarBytes(await fileEntries([{ from: src, to: "/opt/app/" }]));
    expect(second.equals(first)).toBe(true);

    await writeFile(join(dir, "t.tar"), first);
    const listing = (await execa("tar", ["-tvf", join(dir, "t.tar"), "--numeric-owner"])).stdout.split("\n");
    expect(listing.map((l) => l.split(/\s+/).slice(5).join(" "))).toEqual([
      "opt/",
      "opt/app/",
      "opt/app/a.sh",
      "opt/app/b/",
      "opt/app/b/deep/",
      "opt/app/b/deep/file.txt",
      "opt/app/link -> a.sh",
      `opt/app/${"x".repeat(120)}/`,
      `opt/app/${long}`,
    ]);
    expect(listing.every((l) => l.includes("0/0") && l.includes("1970-01-01"))).toBe(true);
    expect(listing[2]).toMatch(/^-rwxr-xr-x/);
    // And our reader reads GNU tar's archives (the mmdebstrap base): ownership, links, data offsets.
    const gnu = join(dir, "gnu.tar");
    await execa("tar", ["-cf", gnu, "--owner=7", "--group=8", "--numeric-owner", "-C", src, "."]);
    const index = normalizeEntries(await indexTar(gnu));
    expect(index.map((e) => [e.path, e.type, e.uid, e.gid])).toContainEqual(["b/deep/file.txt", "file", 7, 8]);
    const file = index.find((e) => e.path === long)!;
    expect((await readFile(gnu)).subarray(file.data!.offset!, file.data!.offset! + file.size).toString()).toBe("long path\n");
  });

  it("makes hard links independent of their order in the source archive", async () => {
    const src = join(dir, "hl");
    await mkdir(src, { recursive: true });
    await writeFile(join(src, "zz"), "shared");
    await execa("ln", [join(src, "zz"), join(src, "aa")]);
    const gnu = join(dir, "hl.tar");
    await execa("tar", ["-cf", gnu, "-C", src, "zz", "aa"]); // zz first: aa is stored as a link to zz
    const entries = normalizeEntries(await indexTar(gnu));
    expect(entries.map((e) => [e.path, e.type, e.linkname])).toEqual([
      ["aa", "file", undefined],
      ["zz", "hardlink", "aa"],
    ]);
    const out = join(dir, "hl-out");
    await mkdir(out);
    await writeFile(join(dir, "hl2.tar"), await tarBytes(entries));
    await execa("tar", ["-xf", join(dir, "hl2.tar"), "-C", out]);
    expect(await readFile(join(out, "zz"), "utf8")).toBe("shared");
  });

  it("stores layers uncompressed: digest and diff_id are both the sha256 of the tar, the same for the same files", async () => {
    const src = join(dir, "plain");
    await mkdir(src, { recursive: true });
    await writeFile(join(src, "data"), "x".repeat(100_000));
    const entries = await fileEntries([{ from: src, to: "/data" }]);
    const a = await writeLayer(entries, "test");
    const b = await writeLayer(entries, "test");
    expect(b).toEqual(a);
    const { ContentStore } = await import("../../builder/cache.js");
    const blob = await readFile(new ContentStore().pathOf(a.digest));
    expect(`sha256:${createHash("sha256").update(blob).digest("hex")}`).toBe(a.digest);
    expect(a.diffId).toBe(a.digest);
    expect(blob.subarray(0, 2)).not.toEqual(Buffer.from([0x1f, 0x8b]));
    expect(blob.subarray(257, 262).toString()).toBe("ustar");
  });
});

describe("image lists and recipes: bad input names the entry", () => {
  async function list(name: string, text: string): Promise<string> {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  }

  it("refuses an entry without a digest", async () => {
    const path = await list("nodigest.yaml", "images:\n  - ref: registry.k8s.io/pause:3.10.2\n    recipe: pause\n");
    const images = await loadSeedLists([path]);
    expect(() => selectImages(images, { profile: "default", kubespray: false })).toThrow(/nodigest\.yaml: registry\.k8s\.io\/pause:3\.10\.2 has no digest/);
    // lock-images builds unpinned entries to compute their digests.
    expect(selectImages(images, { profile: "default", kubespray: false, allowUnpinned: true }).images).toHaveLength(1);
    // In the upstream profile an entry needs an upstream digest.
    const upstream = await list("noupstream.yaml", "images:\n  - ref: docker.io/library/nginx:1.28.0-alpine\n");
    await expect(loadSeedLists([upstream]).then((i) => selectImages(i, { profile: "upstream", kubespray: false }))).rejects.toThrow(
      /nginx:1\.28\.0-alpine has no upstreamDigest/,
    );
  });

  it("refuses a malformed entry with its position and reference", async () => {
    const path = await list("bad.yaml", "images:\n  - ref: registry.k8s.io/pause:3.10.2\n    digest: sha256:1234\n");
    await expect(loadSeedLists([path])).rejects.toThrow(/bad\.yaml: images\.0\.digest \(entry 1, registry\.k8s\.io\/pause:3\.10\.2\): a manifest digest/);
  });

  it("refuses a missing recipe, naming the image", async () => {
    const path = await list("norecipe.yaml", `images:\n  - ref: example.org/x/y:1\n    recipe: does-not-exist\n    digest: sha256:${"0".repeat(64)}\n`);
    const selection = selectImages(await loadSeedLists([path]), { profile: "default", kubespray: false });
    const error = await planImages(selection.images, { imagesDir: join(dir, "images") }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toBe("example.org/x/y:1: its recipe images/does-not-exist/recipe.yaml is missing");
  });

  it("fails the images stage on a digest that does not match, naming list, image, expected and actual digest and the fix", async () => {
    const images = join(dir, "images");
    await mkdir(join(images, "hello"), { recursive: true });
    await writeFile(join(images, "hello/recipe.yaml"), "name: hello\ncopy:\n  - { from: 'recipe:hello.txt', to: /hello.txt }\nentrypoint: [/hello]\n");
    await writeFile(join(images, "hello/hello.txt"), "hello\n");
    const wrong = `sha256:${"1".repeat(64)}`;
    const path = await list("mismatch.yaml", `images:\n  - ref: example.org/icn/hello:1\n    recipe: hello\n    digest: ${wrong}\n`);
    const selection = selectImages(await loadSeedLists([path]), { profile: "default", kubespray: false });
    const plan = await planImages(selection.images, { imagesDir: images });
    const error = (await runStage(imagesStage, { plan }, join(dir, "stages")).catch((e: unknown) => e)) as UserError;
    expect(error).toBeInstanceOf(UserError);
    expect(error.message).toMatch(new RegExp(`mismatch\\.yaml: example\\.org/icn/hello:1: expected ${wrong}, got sha256:[0-9a-f]{64}`));
    expect(error.hint).toMatch(/icn-bootstrap lock-images/);
    // Recording (what lock-images does) gives the digest; pinned, the stage passes and is reproducible.
    const recorded = await runStage(imagesStage, { plan, record: true }, join(dir, "stages"));
    const built = JSON.parse(await readFile(join(recorded.dir, "images.json"), "utf8"));
    expect(await writeDigests(path, { "example.org/icn/hello:1": built[0].digest })).toBe(1);
    const pinned = selectImages(await loadSeedLists([path]), { profile: "default", kubespray: false });
    await rm(join(dir, "cache", "oci-layers"), { recursive: true, force: true }); // rebuild the layer from scratch
    const ok = await runStage(imagesStage, { plan: await planImages(pinned.images, { imagesDir: images }) }, join(dir, "stages"));
    expect(JSON.parse(await readFile(join(ok.dir, "images.json"), "utf8"))[0].digest).toBe(built[0].digest);
  });

  it("gives a base: own-debian recipe its own root as its Debian layer, kept out of the shared base", async () => {
    const images = join(dir, "images");
    await mkdir(join(images, "big"), { recursive: true });
    await mkdir(join(images, "small"), { recursive: true });
    await writeFile(
      join(images, "big/recipe.yaml"),
      "name: big\nbase: own-debian\ndebian: { packages: [python3-ironic, ipmitool] }\ncopy:\n  - { from: 'recipe:start', to: /start }\nentrypoint: [/start]\n",
    );
    await writeFile(join(images, "big/start"), "#!/bin/sh\n");
    await writeFile(join(images, "small/recipe.yaml"), "name: small\ndebian: { packages: [ca-certificates] }\nentrypoint: [/bin/true]\n");
    const path = await list("own.yaml", "images:\n  - ref: example.org/icn/big:1\n    recipe: big\n  - ref: example.org/icn/small:1\n    recipe: small\n");
    const selection = selectImages(await loadSeedLists([path]), { profile: "default", kubespray: false, allowUnpinned: true });
    const plan = await planImages(selection.images, { imagesDir: images });
    expect(plan.basePackages).toEqual(["ca-certificates"]);
    expect(plan.ownRoots).toEqual([{ name: "big", packages: ["ipmitool", "python3-ironic"] }]);
    // Stand-ins for the image-base and image-root stages' tars (mmdebstrap roots in a build).
    const rootStage = async (name: string, file: string) => {
      const out = join(dir, "fake-stages", name);
      await mkdir(out, { recursive: true });
      await writeFile(
        join(out, "base.tar"),
        await tarBytes([{ path: file, type: "file", mode: 0o644, uid: 0, gid: 0, size: 3, data: { file: join(images, "big/start") } }]),
      );
      return { name, key: name, dir: out, reused: false, seconds: 0, bytes: 0 };
    };
    const built = await runStage(
      imagesStage,
      { plan, base: await rootStage("shared", "shared.txt"), roots: { big: await rootStage("big-root", "ironic.txt") }, record: true },
      join(dir, "stages"),
    );
    const layers = JSON.parse(await readFile(join(built.dir, "images.json"), "utf8")) as { ref: string; layers: { digest: string }[] }[];
    const big = layers.find((i) => i.ref === "example.org/icn/big:1")!;
    const small = layers.find((i) => i.ref === "example.org/icn/small:1")!;
    expect(big.layers).toHaveLength(2);
    expect(small.layers).toHaveLength(2);
    expect(big.layers[0]!.digest).not.toBe(small.layers[0]!.digest); // its own root, not the shared base
    await expect(runStage(imagesStage, { plan, base: await rootStage("shared", "shared.txt") }, join(dir, "stages2"))).rejects.toThrow(
      /big has base: own-debian, but its image-root stage did not run/,
    );
  });

  it("refuses an artifacts: entry that names an artifact the recipe does not copy", async () => {
    const images = join(dir, "images");
    await mkdir(join(images, "tool"), { recursive: true });
    await writeFile(join(images, "tool/recipe.yaml"), "name: tool\ncopy:\n  - { from: 'recipe:tool.txt', to: /tool.txt }\nentrypoint: [/tool]\n");
    await writeFile(join(images, "tool/tool.txt"), "tool\n");
    const path = await list(
      "versioned.yaml",
      `images:\n  - ref: example.org/icn/tool:v2\n    recipe: tool\n    artifacts: { kube-apiserver: kube-apiserver-v1.35.3 }\n    digest: sha256:${"0".repeat(64)}\n`,
    );
    const selection = selectImages(await loadSeedLists([path]), { profile: "default", kubespray: false });
    expect(selection.images[0]!.artifacts).toEqual({ "kube-apiserver": "kube-apiserver-v1.35.3" });
    const error = (await planImages(selection.images, { imagesDir: images }).catch((e: unknown) => e)) as UserError;
    expect(error).toBeInstanceOf(UserError);
    expect(error.message).toBe(`${path}: example.org/icn/tool:v2: artifacts: kube-apiserver is not copied by ${join(images, "tool/recipe.yaml")}`);
  });

  it("maps references to repositories without the registry host and refuses two that collide", async () => {
    const path = await list("repos.yaml", `images:\n  - ref: nginx:1\n  - ref: registry.k8s.io/coredns/coredns:v1\n  - ref: docker.io/coredns/coredns:v1\n`);
    await expect(loadSeedLists([path])).rejects.toThrow(/would both be coredns\/coredns:v1/);
    const ok = await list("repos2.yaml", `images:\n  - ref: nginx:1\n  - ref: bootstrap.icn:5000/icn/bpa:0.1.0\n`);
    expect((await loadSeedLists([ok])).map((i) => `${i.repository}:${i.tag}`)).toEqual(["library/nginx:1", "icn/bpa:0.1.0"]);
  });
});

describe("the upstream profile", () => {
  it("pulls an image by its pinned upstream digest with skopeo into the layout (a local registry stands in for upstream)", async () => {
    const { startRegistry } = await import("../../builder/registry/server.js");
    const images = join(dir, "images-up");
    await mkdir(join(images, "hello"), { recursive: true });
    await writeFile(join(images, "hello/recipe.yaml"), "name: hello\ncopy:\n  - { from: 'recipe:hello.txt', to: /hello.txt }\n");
    await writeFile(join(images, "hello/hello.txt"), "hello upstream\n");
    const source = join(dir, "up-source.yaml");
    await writeFile(source, "images:\n  - ref: example.org/icn/hello:1\n    recipe: hello\n");
    const plan = await planImages(selectImages(await loadSeedLists([source]), { profile: "default", kubespray: false, allowUnpinned: true }).images, {
      imagesDir: images,
    });
    const built = await runStage(imagesStage, { plan, record: true }, join(dir, "stages"));
    const digest = JSON.parse(await readFile(join(built.dir, "images.json"), "utf8"))[0].digest as string;
    const upstream = await startRegistry(join(dir, "upstream-storage"));
    const previous = process.env.ICN_BOOTSTRAP_REGISTRIES_CONF;
    try {
      await execa("skopeo", [
        "copy",
        "--quiet",
        "--preserve-digests",
        "--dest-tls-verify=false",
        `oci:${join(built.dir, "oci")}:icn/hello:1`,
        `docker://${upstream.address}/icn/hello:1`,
      ]);
      // The "upstream" registry is a loopback name that the registries.conf maps to the local one
      // (even unmapped it would stay on loopback).
      const conf = join(dir, "registries.conf");
      await writeFile(conf, `[[registry]]\nprefix = "127.0.0.2:5999"\nlocation = "${upstream.address}"\ninsecure = true\n`);
      process.env.ICN_BOOTSTRAP_REGISTRIES_CONF = conf;
      const pinned = join(dir, "up.yaml");
      await writeFile(pinned, `images:\n  - ref: 127.0.0.2:5999/icn/hello:1\n    upstreamDigest: ${digest}\n`);
      const selection = selectImages(await loadSeedLists([pinned]), { profile: "upstream", kubespray: false });
      expect(selection.images.map((i) => i.source)).toEqual(["pull"]);
      const pulled = await runStage(imagesStage, { plan: await planImages(selection.images) }, join(dir, "stages"));
      const result = JSON.parse(await readFile(join(pulled.dir, "images.json"), "utf8"));
      expect(result).toMatchObject([{ ref: "127.0.0.2:5999/icn/hello:1", digest, source: "pull", repository: "icn/hello" }]);
      const index = JSON.parse(await readFile(join(pulled.dir, "oci/index.json"), "utf8"));
      expect(index.manifests.map((m: { annotations: Record<string, string> }) => m.annotations["org.opencontainers.image.ref.name"])).toEqual(["icn/hello:1"]);
      // A pin the upstream registry does not have fails the stage with skopeo's error.
      await writeFile(pinned, `images:\n  - ref: 127.0.0.2:5999/icn/hello:1\n    upstreamDigest: sha256:${"2".repeat(64)}\n`);
      const bad = selectImages(await loadSeedLists([pinned]), { profile: "upstream", kubespray: false });
      await expect(runStage(imagesStage, { plan: await planImages(bad.images) }, join(dir, "stages"))).rejects.toThrow(
        /skopeo.*failed[\s\S]*manifest unknown|skopeo.*failed/,
      );
    } finally {
      if (previous === undefined) delete process.env.ICN_BOOTSTRAP_REGISTRIES_CONF;
      else process.env.ICN_BOOTSTRAP_REGISTRIES_CONF = previous;
      await upstream.stop();
    }
  });
});
