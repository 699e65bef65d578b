import { resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { sha256Text } from "../cache.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../definition.js";
import { UserError } from "../errors.js";
import { requireTools } from "../host-tools.js";
import { TOOLCHAIN_PACKAGES } from "../images/lock.js";
import { buildContent } from "../images/pipeline.js";
import { REPO_ROOT } from "../images/plan.js";
import { writeDigests } from "../images/seed.js";
import { loadLock, lockPathFor, saveLock } from "../lockfile.js";
import { log } from "../log.js";
import { stagesDir } from "../pipeline.js";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { PACKAGES_JSON } from "../stages/image-debian.js";
import { IMAGES_JSON, type BuiltImage } from "../stages/images.js";
import type { Command } from "./command.js";

export const lockImagesCommand: Command = {
  name: "lock-images",
  summary: "pin the images' Debian packages and write the built images' digests into registry-seed/",
  usage: `usage: icn-bootstrap lock-images [--definition FILE] [--keep-packages] [--upstream]

Re-pins the container images the project builds (images/<name>/recipe.yaml):
1. resolves the Debian packages of the shared image base (the union of the recipes'
   debian.packages) and of the C toolchain (gcc, libc6-dev) and writes their exact
   versions to the lock file (images.debian); --keep-packages keeps the pinned ones;
2. builds every image of the definition's lists (registry-seed/*.yaml) and writes each
   built image's manifest digest into its list (digest: sha256:...).
Run it after changing a recipe, a pinned artifact or a package list, check the diff,
and commit it. A build fails when a built image's digest differs from its pin.

--upstream additionally resolves the upstream digest of every listed reference
(skopeo inspect; needs access to the upstream registries) into upstreamDigest.`,
  async run(argv) {
    const { values } = parseCommandArgs("lock-images", argv, { definition: { type: "string" }, "keep-packages": { type: "boolean" }, upstream: { type: "boolean" } });
    const definitionPath = resolve(values.definition ?? DEFAULT_DEFINITION);
    const lockPath = lockPathFor(definitionPath);
    const definition = await loadDefinition(definitionPath);
    await requireTools(["mmdebstrap", "skopeo", "gzip"]);
    let lock = await loadLock(lockPath);
    if (!values["keep-packages"] || !lock.images) {
      log("lock", "resolving the Debian packages of the images");
      const state = sha256Text(`${Date.now()}`).slice(0, 16);
      const content = await buildContent({ definition, lock, lockPath, stagesDir: stagesDir(), resolve: state, record: true, imagesOnly: true });
      const read = async (dir?: string) => (dir ? (JSON.parse(await readFile(join(dir, PACKAGES_JSON), "utf8")) as Record<string, string>) : {});
      lock = {
        ...lock,
        images: {
          debian: {
            base: { requested: content.plan.basePackages, packages: await read(content.imageBase?.dir) },
            toolchain: { requested: TOOLCHAIN_PACKAGES, packages: await read(content.imageCompile?.dir) },
          },
        },
      };
      await saveLock(lockPath, lock);
      console.log(`${lockPath}: images.debian: ${Object.keys(lock.images!.debian.base.packages).length} base packages, ${Object.keys(lock.images!.debian.toolchain.packages).length} toolchain packages pinned`);
    }
    // Build with the pinned packages and record the digests.
    const content = await buildContent({ definition, lock, lockPath, stagesDir: stagesDir(), record: true, imagesOnly: true });
    const built: BuiltImage[] = JSON.parse(await readFile(join(content.images.dir, IMAGES_JSON), "utf8"));
    const byList = new Map<string, Record<string, string>>();
    for (const image of built.filter((b) => b.source === "recipe")) {
      const digests = byList.get(image.list) ?? {};
      digests[image.ref] = image.digest;
      byList.set(image.list, digests);
      console.log(`${image.ref} ${image.digest}`);
    }
    for (const [list, digests] of byList) {
      const changed = await writeDigests(list, digests);
      console.log(`${list.replace(`${REPO_ROOT}/`, "")}: ${Object.keys(digests).length} digests, ${changed} changed`);
    }
    if (values.upstream) {
      const { loadSeedLists } = await import("../images/seed.js");
      const lists = definition.registry.lists.map((l) => resolve(REPO_ROOT, l));
      const { execa } = await import("execa");
      const upstream = new Map<string, Record<string, string>>();
      for (const image of await loadSeedLists(lists)) {
        if (image.ref.startsWith("bootstrap.icn")) continue;
        const result = await execa("skopeo", ["inspect", "--format", "{{.Digest}}", "--no-tags", `docker://${image.ref}`], { reject: false });
        if (result.failed) throw new UserError(`${image.list}: cannot resolve ${image.ref} upstream: ${String(result.stderr).trim()}`, "the upstream profile needs access to the image's registry");
        const digests = upstream.get(image.list) ?? {};
        digests[image.ref] = String(result.stdout).trim();
        upstream.set(image.list, digests);
      }
      for (const [list, digests] of upstream) await writeDigests(list, digests, "upstreamDigest");
    }
  },
};
