/** The API's OpenAPI 3.1 document, served at /openapi.json. */

const error = {
  description: "An error: `{ error: message }` naming the input and the fix",
  content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
};
const authErrors = {
  "401": { ...error, description: "No bearer token, or one the bootstrap cluster does not accept (TokenReview)" },
  "403": { ...error, description: "The cluster's RBAC does not grant the permission (SubjectAccessReview)" },
};
const tusHeaders = {
  "Tus-Resumable": { required: true, schema: { type: "string", const: "1.0.0" } },
};
const uploadId = { name: "id", in: "path", required: true, schema: { type: "string" }, description: "From the Location header of the POST" };
const list = (ref: string) => ({
  "200": { description: "OK", content: { "application/json": { schema: { type: "object", properties: { items: { type: "array", items: { $ref: ref } } } } } } },
});

export function openApiDocument(): Record<string, unknown> {
  return {
    openapi: "3.1.0",
    info: {
      title: "icn-bootstrap BPA REST API",
      version: "v1",
      description:
        "Resumable uploads (tus 1.0.0: creation, termination, expiration) of files, container images and OS images to the ICN bootstrap appliance, and install status. " +
        "Authenticate with a bearer token of the bootstrap cluster made for audience icn-bpa-api (kubectl create token SERVICEACCOUNT -n NAMESPACE --audience icn-bpa-api); RBAC decides: create on uploads.bpa.akraino.org in bpa-system to upload, list to read uploads, list provisionings.bpa.akraino.org / baremetalhosts.metal3.io cluster-wide for the install status. " +
        "A published name belongs to the user who published it (update on uploads.bpa.akraino.org: the right to replace others'); the build's names (its OS images, the registry's shipped repositories, the addons catalog's charts) to nobody.",
    },
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer", description: "A Kubernetes token of the bootstrap cluster" } },
      schemas: {
        Error: { type: "object", required: ["error"], properties: { error: { type: "string" } } },
        Upload: {
          type: "object",
          required: ["id", "kind", "name", "sha256", "size", "state"],
          properties: {
            id: { type: "string" },
            kind: { enum: ["file", "container-image", "os-image", "chart"] },
            name: { type: "string" },
            sha256: { type: "string", description: "The sha256 the client stated for the uploaded bytes" },
            size: { type: "integer" },
            offset: { type: "integer", description: "Bytes stored so far (state uploading)" },
            state: { enum: ["uploading", "verifying", "publishing", "published", "replaced", "rejected", "failed"] },
            user: { type: "string" },
            created: { type: "string", format: "date-time" },
            finished: { type: "string", format: "date-time" },
            url: {
              type: "string",
              description:
                "file/os-image: its URL on the file server; container-image: host/repository@digest; chart: oci://host/repository (spec.addons[].chart)",
            },
            version: { type: "string", description: "chart: the chart's version (spec.addons[].version)" },
            digest: { type: "string", description: "container-image and chart: the manifest digest; otherwise sha256:<hex> of the file" },
            format: { enum: ["qcow2", "raw"] },
            checksum: { type: "string", description: "os-image: its sha256 (hex), BareMetalHost spec.image.checksum" },
            checksumType: { const: "sha256", description: "os-image: BareMetalHost spec.image.checksumType" },
            checksumUrl: { type: "string", description: "os-image: the URL of its sha256sum file" },
            error: { type: "string" },
            bytesReceived: { type: "integer", description: "Bytes this server process received for the upload" },
          },
        },
        OsImage: {
          type: "object",
          properties: {
            name: { type: "string" },
            url: { type: "string", description: "BareMetalHost spec.image.url" },
            checksum: { type: "string", description: "BareMetalHost spec.image.checksum: the image's sha256 (hex)" },
            checksumType: { const: "sha256", description: "BareMetalHost spec.image.checksumType" },
            checksumUrl: { type: "string", description: "The URL of the image's sha256sum file on the file server" },
            sha256: { type: "string" },
            format: { enum: ["qcow2", "raw"], description: "BareMetalHost spec.image.format" },
            size: { type: "integer" },
            published: { type: "string", format: "date-time" },
            source: {
              enum: ["upload", "build"],
              description: "upload: published through this API; build: made by the appliance's build (the compute nodes' image)",
            },
          },
        },
        Provisioning: {
          type: "object",
          properties: {
            namespace: { type: "string" },
            name: { type: "string" },
            phase: { type: "string" },
            ready: { type: "object" },
            conditions: { type: "array", items: { type: "object" } },
            hosts: {
              type: "array",
              items: {
                type: "object",
                properties: {
                  name: { type: "string" },
                  namespace: { type: "string" },
                  role: { type: "string" },
                  ip: { type: "string" },
                  mac: { type: "string" },
                },
              },
            },
            installJob: {
              type: "object",
              properties: {
                name: { type: "string" },
                state: { enum: ["pending", "running", "succeeded", "failed"] },
                startTime: { type: "string" },
                completionTime: { type: "string" },
                message: { type: "string" },
              },
            },
            kubeconfigSecret: { type: "string" },
            podAgents: { type: "array", items: { type: "string" } },
          },
        },
        Host: {
          type: "object",
          properties: {
            namespace: { type: "string" },
            name: { type: "string" },
            state: { type: "string" },
            online: { type: "boolean" },
            cpu: { type: "integer" },
            ramMebibytes: { type: "integer" },
            ip: { type: "string" },
            consumer: { type: "string" },
          },
        },
      },
    },
    security: [{ bearer: [] }],
    paths: {
      "/": {
        get: {
          summary: "The status page (HTML; its data is fetched with the token the user enters)",
          security: [],
          responses: { "200": { description: "HTML" } },
        },
      },
      "/page.js": { get: { summary: "The status page's script", security: [], responses: { "200": { description: "JavaScript" } } } },
      "/openapi.json": { get: { summary: "This document", security: [], responses: { "200": { description: "OpenAPI 3.1" } } } },
      "/healthz": { get: { summary: "Liveness", security: [], responses: { "200": { description: "ok" } } } },
      "/api/v1/uploads": {
        get: {
          summary: "Every upload: in progress, published, replaced, rejected or failed",
          responses: { ...list("#/components/schemas/Upload"), ...authErrors },
        },
        options: {
          summary: "tus discovery (Tus-Version, Tus-Extension, Tus-Max-Size)",
          security: [],
          responses: { "204": { description: "tus capabilities" } },
        },
        post: {
          summary: "Create a resumable upload (tus creation). Upload-Metadata: kind, name, sha256 (base64 values, tus format), optional filename",
          parameters: [
            { name: "Upload-Length", in: "header", required: true, schema: { type: "integer" } },
            {
              name: "Upload-Metadata",
              in: "header",
              required: true,
              schema: { type: "string" },
              description: "kind <b64(file|container-image|os-image|chart)>,name <b64(name)>,sha256 <b64(64 hex digits)>",
            },
            ...Object.entries(tusHeaders).map(([name, h]) => ({ name, in: "header", ...h })),
          ],
          responses: {
            "201": { description: "Created; Location is the upload's URL" },
            "400": { ...error, description: "Bad metadata (kind, name, sha256) or no Upload-Length" },
            "409": {
              ...error,
              description:
                "An upload of the same published name is in progress; or the name belongs to another user (only they, or a caller granted update on uploads, may replace it) or to the build (nobody may): the message names the owner",
            },
            "413": { ...error, description: "Larger than the appliance's upload limit" },
            "503": { ...error, description: "Who owns the name could not be read (the cluster or the registry did not answer); retry" },
            "507": { ...error, description: "Not enough disk space" },
            ...authErrors,
          },
        },
      },
      "/api/v1/uploads/{id}": {
        head: {
          summary: "Where to resume (Upload-Offset, Upload-Length)",
          parameters: [uploadId],
          responses: { "200": { description: "Upload-Offset header" }, "404": error, ...authErrors },
        },
        patch: {
          summary:
            "Send bytes from Upload-Offset (Content-Type application/offset+octet-stream). The last PATCH verifies the sha256 and publishes before it answers",
          parameters: [uploadId, { name: "Upload-Offset", in: "header", required: true, schema: { type: "integer" } }],
          responses: {
            "204": { description: "Bytes stored; more to come" },
            "200": {
              description: "The last bytes: verified and published",
              content: { "application/json": { schema: { $ref: "#/components/schemas/Upload" } } },
            },
            "409": {
              description:
                "Upload-Offset is not where the upload is (HEAD tells); or, on the last PATCH, the name clashes with what is published, or has become another user's or the build's since the upload was created (nothing published)",
            },
            "422": { description: "sha256 mismatch or a bad image archive: nothing published, the upload removed" },
            "502": { description: "The registry refused the push: nothing published" },
            "503": { description: "Who owns the name could not be read (the cluster or the registry did not answer): nothing published; retry" },
            "507": { description: "The disk filled up: received bytes are kept; free space and resume" },
            ...authErrors,
          },
        },
        delete: {
          summary: "Abandon an upload in progress (tus termination)",
          parameters: [uploadId],
          responses: { "204": { description: "Removed" }, "404": error, ...authErrors },
        },
      },
      "/api/v1/os-images": {
        get: {
          summary: "The OS images on the file server (published uploads and the build's own) with the URL and checksum a BareMetalHost's spec.image takes",
          responses: { ...list("#/components/schemas/OsImage"), ...authErrors },
        },
      },
      "/api/v1/provisionings": {
        get: {
          summary: "Every Provisioning's install state, read from the Kubernetes API",
          responses: { ...list("#/components/schemas/Provisioning"), ...authErrors },
        },
      },
      "/api/v1/hosts": { get: { summary: "BareMetalHosts (empty without Metal3's CRD)", responses: { ...list("#/components/schemas/Host"), ...authErrors } } },
      "/api/v1/appliance/upgrade": {
        get: {
          summary:
            "The upgrade request the appliance has not taken yet (pending) and the last upgrade's state as the appliance reports it (icn-upgrade status): get on applianceupgrades",
          responses: { "200": { description: "{pending, state}", content: { "application/json": { schema: { type: "object" } } } }, ...authErrors },
        },
        post: {
          summary:
            'Ask the appliance to upgrade itself to an uploaded appliance image: body {"image": "NAME.img"}; NAME.report.json and NAME.report.json.sigstore.json must be uploaded too. The appliance checks the signatures with the keys it trusts before writing anything (docs/upgrade.md): create on applianceupgrades (ClusterRole bpa-api-appliance-admin)',
          responses: {
            "202": { description: "Requested: the appliance takes it within seconds; GET follows it" },
            "400": { ...error, description: "No image name, or not a USB image's name" },
            "409": {
              ...error,
              description: "The image, its report or the report's signature was not uploaded; or an upgrade is already requested or under way",
            },
            "413": { ...error, description: "A body larger than 4 KiB" },
            ...authErrors,
          },
        },
        delete: {
          summary: "Withdraw a request the appliance has not taken yet: create on applianceupgrades",
          responses: { "200": { description: "Withdrawn" }, "404": { ...error, description: "No request is waiting" }, ...authErrors },
        },
      },
    },
  };
}
