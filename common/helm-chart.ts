/**
 * A Helm chart as an OCI artifact, laid out as `helm push` lays it out: a manifest whose
 * config is the chart's metadata as JSON and whose one layer is the packaged .tgz. The
 * BPA's chart uploads and the build's seeded charts both make it here, so `helm pull
 * oci://…` finds either the same way.
 */
export const HELM_CONFIG_MEDIA_TYPE = "application/vnd.cncf.helm.config.v1+json";
export const HELM_CHART_MEDIA_TYPE = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
export const OCI_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json";

export interface ChartMetadata {
  apiVersion: string;
  name: string;
  version: string;
  [key: string]: unknown;
}

export interface BlobRef {
  digest: string;
  size: number;
}

/** The chart's config blob: its Chart.yaml metadata as JSON. */
export function chartConfig(meta: ChartMetadata): Buffer {
  return Buffer.from(JSON.stringify(meta));
}

/** The manifest of a chart whose config and .tgz are the given blobs. */
export function chartManifest(meta: ChartMetadata, config: BlobRef, chart: BlobRef): Buffer {
  return Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: OCI_MANIFEST_MEDIA_TYPE,
      config: { mediaType: HELM_CONFIG_MEDIA_TYPE, digest: config.digest, size: config.size },
      layers: [{ mediaType: HELM_CHART_MEDIA_TYPE, digest: chart.digest, size: chart.size }],
      annotations: { "org.opencontainers.image.title": meta.name, "org.opencontainers.image.version": meta.version },
    }),
  );
}

/** OCI tags cannot hold "+": Helm writes it as "_" (helm push does the same). */
export const chartVersionTag = (version: string) => version.replace(/\+/g, "_");
