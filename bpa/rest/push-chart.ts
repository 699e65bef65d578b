/**
 * A verified Helm chart (the .tgz `helm package` makes) into the appliance's registry as an
 * OCI artifact, laid out as `helm push` lays it out (Helm's OCI support: a manifest whose
 * config is the chart's metadata as JSON, media type application/vnd.cncf.helm.config.v1+json,
 * and one layer, the .tgz itself, application/vnd.cncf.helm.chart.content.v1.tar+gzip), under
 * the tag of its version, so that `helm pull oci://…` and the BPA's addons Jobs find it.
 *
 * The archive is untrusted: it is unpacked (streamed, nothing written) to at most
 * MAX_UNPACKED_BYTES, only Chart.yaml is read, at most MAX_CHART_YAML_BYTES, without YAML
 * aliases (a few hundred bytes of nested aliases expand to gigabytes), and only the fields
 * Helm needs are kept. The repository's last segment must be the chart's name, the tag its
 * version (Helm pulls by them).
 */
import { createReadStream } from "node:fs";
import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createGunzip } from "node:zlib";
import { Parser, type ReadEntry } from "tar";
import yaml from "js-yaml";
import { RequestError, parseImageName } from "../../common/uploads.js";
import { sha256File } from "../../common/hash.js";
import { chartConfig, chartManifest, chartVersionTag, OCI_MANIFEST_MEDIA_TYPE, type ChartMetadata } from "../../common/helm-chart.js";
import type { RegistryClient } from "./registry.js";

const MAX_CHART_YAML_BYTES = 1024 * 1024;
/** A chart has a handful of files; more entries than this are no chart. */
const MAX_ENTRIES = 10_000;
/** Helm's own limit on a chart's decompressed size (helm --max-chart-size, 100 MiB). */
const MAX_UNPACKED_BYTES = 100 * 1024 * 1024;
/** What is kept of Chart.yaml, as strings: Helm's OCI config needs name and version; the rest describes the chart. */
const KEPT_FIELDS = ["apiVersion", "name", "version", "appVersion", "description", "type", "kubeVersion"] as const;

/** Chart.yaml of a packaged chart (<name>/Chart.yaml), or a RequestError naming what is wrong. */
export async function readChartYaml(file: string): Promise<ChartMetadata> {
  let text: string | undefined;
  let entries = 0;
  let tooLarge = false;
  const parser = new Parser({
    onReadEntry: (entry: ReadEntry) => {
      entries++;
      if (!text && /^[^/]+\/Chart\.yaml$/.test(entry.path) && entry.type === "File") {
        if (entry.size > MAX_CHART_YAML_BYTES) tooLarge = true;
        else {
          const chunks: Buffer[] = [];
          entry.on("data", (c: Buffer) => chunks.push(c));
          entry.on("end", () => (text = Buffer.concat(chunks).toString("utf8")));
          return;
        }
      }
      entry.resume();
    },
  });
  try {
    await new Promise<void>((resolve, reject) => {
      const input = createReadStream(file);
      const gunzip = createGunzip();
      input.on("error", reject);
      gunzip.on("error", reject);
      parser.on("error", reject);
      parser.on("end", () => resolve());
      input.pipe(gunzip).pipe(parser);
      let unpacked = 0;
      gunzip.on("data", (chunk: Buffer) => {
        unpacked += chunk.length;
        const problem =
          entries > MAX_ENTRIES
            ? `the chart has more than ${MAX_ENTRIES} files: not a Helm chart`
            : unpacked > MAX_UNPACKED_BYTES
              ? `the chart unpacks to more than ${MAX_UNPACKED_BYTES / 1024 / 1024} MiB (Helm's own limit on a chart): not a Helm chart`
              : undefined;
        if (problem) {
          input.destroy();
          gunzip.destroy();
          reject(new RequestError(422, problem));
        }
      });
    });
  } catch (error) {
    if (error instanceof RequestError) throw error;
    throw new RequestError(422, `not a packaged Helm chart (a .tgz from helm package): ${(error as Error).message}`);
  }
  if (tooLarge) throw new RequestError(422, `the chart's Chart.yaml is over ${MAX_CHART_YAML_BYTES / 1024} KiB: not a Helm chart`);
  if (text === undefined) throw new RequestError(422, "no <name>/Chart.yaml in the archive: not a packaged Helm chart (make it with helm package DIR)");
  let doc: unknown;
  try {
    doc = yaml.load(text);
  } catch (error) {
    throw new RequestError(422, `the chart's Chart.yaml is not YAML: ${(error as Error).message.split("\n")[0]}`);
  }
  refuseAliases(doc);
  const m = (doc ?? {}) as Record<string, unknown>;
  if (typeof m !== "object" || typeof m.name !== "string" || typeof m.version !== "string" || typeof m.apiVersion !== "string") {
    throw new RequestError(422, "the chart's Chart.yaml needs apiVersion, name and version");
  }
  const kept: Record<string, string> = {};
  for (const field of KEPT_FIELDS) if (typeof m[field] === "string") kept[field] = m[field];
  return kept as ChartMetadata;
}

/**
 * js-yaml shares an aliased node (*name) instead of copying it, so loading is cheap, but
 * anything that walks the result (JSON, the registry's config) expands it: refused, naming it.
 */
function refuseAliases(value: unknown, seen = new Set<object>()): void {
  if (value === null || typeof value !== "object") return;
  if (seen.has(value)) {
    throw new RequestError(
      422,
      "the chart's Chart.yaml uses YAML aliases (&anchor and *alias): this API does not expand them; write the values out (helm package keeps Chart.yaml as written)",
    );
  }
  seen.add(value);
  for (const child of Object.values(value)) refuseAliases(child, seen);
}

/** A packaged chart, read and checked against the name it is uploaded under. */
export interface CheckedChart {
  meta: ChartMetadata;
  repository: string;
  /** The registry tag: the chart's version ("+" written "_"). */
  tag: string;
}

/** Reads the chart's Chart.yaml and checks it against NAME (repository[:version]). */
export async function checkChart(file: string, name: string): Promise<CheckedChart> {
  const { repository, tag } = parseImageName(name);
  const meta = await readChartYaml(file);
  const expectedName = repository.split("/").pop();
  if (meta.name !== expectedName) {
    throw new RequestError(
      422,
      `the chart is named "${meta.name}" but would be published as ${repository}: Helm pulls a chart by its name, so the name's last segment must be it (e.g. --name ${[...repository.split("/").slice(0, -1), meta.name].join("/")}:${meta.version})`,
    );
  }
  const versionTag = chartVersionTag(meta.version);
  if (tag !== versionTag && !(tag === "latest" && !name.includes(":"))) {
    throw new RequestError(422, `the chart's version is ${meta.version}, but the name asks for tag ${tag}: name it ${repository}:${versionTag}`);
  }
  return { meta, repository, tag: versionTag };
}

/**
 * Pushes a chart (checked, or checked here against its NAME) under its repository and version.
 * Returns the digest and the reference the addons of a Provisioning name it by
 * (spec.addons[].chart and version).
 */
export async function pushChart(
  file: string,
  work: string,
  chart: CheckedChart | string,
  client: RegistryClient,
  pullHost: string,
): Promise<{ digest: string; url: string; version: string }> {
  const { meta, repository, tag: versionTag } = typeof chart === "string" ? await checkChart(file, chart) : chart;
  await mkdir(work, { recursive: true });
  try {
    const config = chartConfig(meta);
    const configFile = join(work, "config.json");
    await writeFile(configFile, config);
    const configDigest = `sha256:${await sha256File(configFile)}`;
    const layerDigest = `sha256:${await sha256File(file)}`;
    const layerSize = (await stat(file)).size;
    await client.pushBlob(repository, configDigest, config.length, configFile);
    await client.pushBlob(repository, layerDigest, layerSize, file);
    const manifest = chartManifest(meta, { digest: configDigest, size: config.length }, { digest: layerDigest, size: layerSize });
    const digest = await client.pushManifest(repository, versionTag, OCI_MANIFEST_MEDIA_TYPE, manifest);
    return { digest, url: `oci://${pullHost}/${repository}`, version: meta.version };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
