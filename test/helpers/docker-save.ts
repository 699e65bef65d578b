import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { c as tarCreate } from "tar";

const digestOf = (data: Buffer | string) => `sha256:${createHash("sha256").update(data).digest("hex")}`;

/**
 * A `docker save` archive of one linux/amd64 image with one uncompressed layer holding
 * `files` (name -> content), as `docker save` writes it. Returns the archive's path and
 * the layer's digest (its diff_id).
 */
export async function dockerSaveArchive(work: string, name: string, files: Record<string, string>): Promise<{ archive: string; layerDigest: string }> {
  const dir = await mkdtemp(join(work, `${name}-save-`));
  const content = await mkdtemp(join(work, `${name}-content-`));
  for (const [file, text] of Object.entries(files)) await writeFile(join(content, file), text);
  await mkdir(join(dir, "layer1"), { recursive: true });
  await tarCreate({ cwd: content, file: join(dir, "layer1/layer.tar"), portable: true }, Object.keys(files));
  const layerDigest = digestOf(await readFile(join(dir, "layer1/layer.tar")));
  const config = JSON.stringify({ architecture: "amd64", os: "linux", config: { Cmd: ["/hello"] }, rootfs: { type: "layers", diff_ids: [layerDigest] } });
  const configName = `${digestOf(config).slice(7)}.json`;
  await writeFile(join(dir, configName), config);
  await writeFile(join(dir, "manifest.json"), JSON.stringify([{ Config: configName, RepoTags: [`${name}:1`], Layers: ["layer1/layer.tar"] }]));
  const archive = join(work, `${name}.docker.tar`);
  await tarCreate({ cwd: dir, file: archive, portable: true }, ["manifest.json", configName, "layer1"]);
  return { archive, layerDigest };
}
