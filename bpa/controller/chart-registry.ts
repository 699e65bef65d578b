/**
 * What a chart version's tag names in the appliance's registry: the digest of its manifest,
 * read as the addons Job's Helm would pull it (TLS verified with the registry's site CA, the
 * chart's registry name mapped to addonsRegistryIP as the Job's hostAliases map it; no
 * credentials: the registry answers reads to anyone). The digest is computed from the
 * manifest's bytes, so it does not rest on the registry's header.
 */
import { createHash } from "node:crypto";
import { request } from "node:https";
import { isIP } from "node:net";
import { chartTag, type ResolvedAddon } from "../api/addons.js";

export type TagLookup = { digest: string } | { missing: string } | { error: string };
/** Keyed by tagKey(chart, version). */
export type TagLookups = ReadonlyMap<string, TagLookup>;

export const tagKey = (chart: string, version: string) => `${chart}:${version}`;
/** A chart version as people name it: bootstrap.icn:5000/charts/multus:4.3.0. */
export const chartRef = (chart: string, version: string) => `${chart.replace(/^oci:\/\//, "")}:${chartTag(version)}`;

export interface RegistryAccess {
  /** PEM of the registry's site CA. */
  ca: string;
  /** Where the registry's name is reached (configuration addonsRegistryIP); unset: by DNS. */
  registryIP?: string;
  timeoutMs?: number;
}

const ACCEPT = [
  "application/vnd.oci.image.manifest.v1+json",
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.v2+json",
].join(", ");
/** A chart's manifest is a few hundred bytes; anything this big is not one. */
const MAX_MANIFEST_BYTES = 1024 * 1024;

/** The manifest digest of chart:version (Helm's tag for it), or why there is none. */
export function lookUpChartTag(chart: string, version: string, access: RegistryAccess): Promise<TagLookup> {
  const url = new URL(chart.replace(/^oci:\/\//, "https://"));
  const name = url.hostname;
  const repository = url.pathname.replace(/^\//, "");
  const where = `registry ${url.host}${access.registryIP && !isIP(name) ? ` (${access.registryIP})` : ""}`;
  const path = `/v2/${repository}/manifests/${encodeURIComponent(chartTag(version))}`;
  return new Promise((resolve) => {
    const req = request(
      {
        host: access.registryIP && !isIP(name) ? access.registryIP : name,
        port: url.port || 443,
        ...(isIP(name) ? {} : { servername: name }),
        path,
        method: "GET",
        headers: { host: url.host, accept: ACCEPT },
        ca: access.ca,
        timeout: access.timeoutMs ?? 5_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_MANIFEST_BYTES) req.destroy(new Error(`the manifest is over ${MAX_MANIFEST_BYTES} bytes`));
          else chunks.push(chunk);
        });
        res.on("end", () => {
          const body = Buffer.concat(chunks);
          if (res.statusCode === 404) return resolve({ missing: `${chartRef(chart, version)} is not in the ${where}` });
          if (res.statusCode !== 200)
            return resolve({ error: `${where} answered HTTP ${res.statusCode} for ${chartRef(chart, version)}: ${body.toString("utf8").slice(0, 300)}` });
          const digest = `sha256:${createHash("sha256").update(body).digest("hex")}`;
          const said = res.headers["docker-content-digest"];
          if (typeof said === "string" && said !== digest)
            return resolve({ error: `${where} sent a manifest for ${chartRef(chart, version)} whose digest ${digest} is not the ${said} it named` });
          resolve({ digest });
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${access.timeoutMs ?? 5_000} ms`)));
    req.on("error", (error) => resolve({ error: `${where}: ${chartRef(chart, version)}: ${error.message}` }));
    req.end();
  });
}

/** Each distinct chart version of the addons, looked up at once. */
export async function lookUpChartTags(addons: readonly ResolvedAddon[], access: RegistryAccess): Promise<TagLookups> {
  const keys = new Map(addons.map((a) => [tagKey(a.chart, a.version), a]));
  const found = await Promise.all([...keys].map(async ([key, a]) => [key, await lookUpChartTag(a.chart, a.version, access)] as const));
  return new Map(found);
}
