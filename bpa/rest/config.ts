/** The REST API's settings: command-line flags over environment variables over defaults. */
import { z } from "zod";
import { UserError } from "../../common/errors.js";
import { TOKEN_AUDIENCE } from "./auth.js";

const GiB = 1024 ** 3;

const Schema = z
  .object({
    port: z.coerce.number().int().min(0).max(65535),
    host: z.string().optional(),
    tlsCert: z.string().optional(),
    tlsKey: z.string().optional(),
    plainHttp: z.boolean(),
    stateDir: z.string().startsWith("/", "an absolute directory"),
    namespace: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "a namespace name"),
    maxUploadBytes: z.coerce.number().int().positive(),
    reserveBytes: z.coerce.number().int().min(0),
    expirationHours: z.coerce.number().positive(),
    tlsReloadSeconds: z.coerce.number().positive(),
    publicFilesUrl: z
      .string()
      .regex(/^https?:\/\/[^/\s]+(\/\S*)?$/, "an http(s) URL such as http://bootstrap.icn:8080")
      .optional(),
    registryUrl: z.string().regex(/^https?:\/\/[^/\s]+$/, "an https URL of the registry such as https://bootstrap.icn:5000"),
    pullHost: z.string().regex(/^[^/\s]+$/, "host:port as nodes pull from, such as bootstrap.icn:5000"),
    pushSecret: z.string().min(1),
    caConfigMap: z.string().min(1),
    caKey: z.string().min(1),
    tokenAudience: z.string().min(1),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (!c.plainHttp && !(c.tlsCert && c.tlsKey)) {
      ctx.addIssue({
        code: "custom",
        path: ["tlsCert"],
        message: "TLS needs --tls-cert and --tls-key (BPA_API_TLS_CERT, BPA_API_TLS_KEY); --plain-http only for a workstation",
      });
    }
  });

export type ApiConfig = z.infer<typeof Schema>;

/** Environment variable of each field. */
export const ENV: Record<keyof ApiConfig, string> = {
  port: "BPA_API_PORT",
  host: "BPA_API_HOST",
  tlsCert: "BPA_API_TLS_CERT",
  tlsKey: "BPA_API_TLS_KEY",
  plainHttp: "BPA_API_PLAIN_HTTP",
  stateDir: "BPA_API_STATE_DIR",
  namespace: "POD_NAMESPACE",
  maxUploadBytes: "BPA_API_MAX_UPLOAD_BYTES",
  reserveBytes: "BPA_API_RESERVE_BYTES",
  expirationHours: "BPA_API_UPLOAD_EXPIRATION_HOURS",
  tlsReloadSeconds: "BPA_API_TLS_RELOAD_SECONDS",
  publicFilesUrl: "BPA_API_PUBLIC_FILES_URL",
  registryUrl: "BPA_API_REGISTRY_URL",
  pullHost: "BPA_API_PULL_HOST",
  pushSecret: "BPA_API_PUSH_SECRET",
  caConfigMap: "BPA_API_REGISTRY_CA_CONFIGMAP",
  caKey: "BPA_API_REGISTRY_CA_KEY",
  tokenAudience: "BPA_API_TOKEN_AUDIENCE",
};

export const DEFAULTS = {
  port: 8443,
  plainHttp: false,
  stateDir: "/var/lib/icn-bootstrap/bpa-api",
  namespace: "bpa-system",
  maxUploadBytes: 64 * GiB,
  reserveBytes: 2 * GiB,
  expirationHours: 24,
  tlsReloadSeconds: 30,
  registryUrl: "https://bootstrap.icn:5000",
  pullHost: "bootstrap.icn:5000",
  pushSecret: "icn-registry-api",
  caConfigMap: "icn-registry-ca",
  caKey: "ca.crt",
  tokenAudience: TOKEN_AUDIENCE,
};

export function loadApiConfig(flags: Partial<Record<keyof ApiConfig, unknown>>, env: NodeJS.ProcessEnv = process.env): ApiConfig {
  const raw: Record<string, unknown> = { ...DEFAULTS };
  for (const [field, name] of Object.entries(ENV)) {
    const value = env[name];
    if (value !== undefined && value !== "") raw[field] = field === "plainHttp" ? value === "true" : value;
  }
  for (const [field, value] of Object.entries(flags)) if (value !== undefined) raw[field] = value;
  const parsed = Schema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => {
      const field = String(i.path[0] ?? "");
      return `${field}${ENV[field as keyof ApiConfig] ? ` (${ENV[field as keyof ApiConfig]})` : ""}: ${i.message}`;
    });
    throw new UserError(`bad REST API configuration: ${problems.join("; ")}`, "see docs/rest-api.md");
  }
  return parsed.data;
}
