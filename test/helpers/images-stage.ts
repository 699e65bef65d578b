import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ContentStore } from "../../builder/cache.js";
import { fileEntries, writeLayer } from "../../builder/oci/layer.js";
import { OciLayout } from "../../builder/oci/layout.js";
import { IMAGES_JSON, OCI_DIR } from "../../builder/stages/images.js";

export interface MiniImage {
  repository: string;
  tag: string;
  tags: string[];
  digest: string;
}

/**
 * An images stage's output in miniature, for the images bundle: two small images in an
 * OCI layout (`icn/bpa:0.1.0`, also tagged `latest`, and `icn/ironic:39.0.0`) and their list.
 */
export async function makeImagesStage(dir: string, storeDir: string): Promise<MiniImage[]> {
  const store = new ContentStore(storeDir);
  const layout = new OciLayout(join(dir, OCI_DIR), store);
  const images: MiniImage[] = [];
  for (const [repository, tag, tags] of [
    ["icn/bpa", "0.1.0", ["latest"]],
    ["icn/ironic", "39.0.0", []],
  ] as const) {
    const file = join(dir, `${repository.replace("/", "-")}.txt`);
    await writeFile(file, `the ${repository} program\n`);
    const layer = await writeLayer(await fileEntries([{ from: file, to: `usr/share/${repository}.txt` }]), repository, store);
    const descriptor = await layout.addImage(`${repository}:${tag}`, [layer], { cmd: ["/bin/true"] });
    images.push({ repository, tag, tags: [...tags], digest: descriptor.digest });
  }
  await layout.writeIndex();
  await writeFile(join(dir, IMAGES_JSON), JSON.stringify(images.map((i) => ({ ...i, layers: [] }))));
  return images;
}
