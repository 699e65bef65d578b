/**
 * The operator's configuration: a YAML file (BPA_CONFIG, mounted from the ConfigMap in
 * manifests/bpa/) and environment variables that override single fields. Every value that
 * reaches an install Job or the kubespray variables is validated here.
 */
import { readFileSync } from "node:fs";
import yaml from "js-yaml";
import { z } from "zod";
import { UserError } from "../../common/errors.js";
import { QUANTITY_PATTERN } from "../api/quantity.js";
import { KUBESPRAY_PINS_CONFIGMAP, KUBESPRAY_PINS_KEY } from "../../common/kubespray-pins.js";
import { ADDONS_CATALOG_CONFIGMAP, ADDONS_CATALOG_KEY } from "../../common/addons-catalog.js";

/** An OCI image reference: [registry[:port]/]path[:tag][@sha256:digest]. */
const ImageRef = z
  .string()
  .regex(
    /^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?\/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$/,
    "an image reference such as 192.168.0.1:5000/icn/kubespray-runner:2.27.0",
  );
/** host[:port], as containerd and kubespray's registry_host expect it. */
const HostPort = z
  .string()
  .regex(
    /^(?:[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$/,
    "a host or host:port such as 192.168.0.1:5000",
  );
const HttpUrl = z
  .string()
  .url("an http(s) URL such as http://192.168.0.1:8080/kubespray")
  .refine((u) => /^https?:\/\//.test(u), "an http(s) URL")
  .transform((u) => u.replace(/\/+$/, ""));
const Namespace = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "a namespace name")
  .max(63);
const DnsName = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "a Kubernetes object name")
  .max(253);

const Mirror = z
  .object({
    host: z.string().regex(/^https?:\/\/\S+$/, "an http(s) URL of a registry"),
    capabilities: z.array(z.enum(["pull", "resolve", "push"])).default(["pull", "resolve"]),
    skip_verify: z.boolean().default(false),
    /** CA file(s) on the node that verify this mirror (kubespray's hosts.toml.j2 `ca`). */
    ca: z.union([z.string().min(1), z.array(z.string().min(1))]).optional(),
  })
  .strict();
/**
 * An absolute file path on the compute nodes, written into containerd's hosts.toml as a
 * TOML string: no quotes, backslashes, whitespace or `..` segments.
 */
const NodePath = z
  .string()
  .regex(/^\/[A-Za-z0-9._\/+-]*[A-Za-z0-9._+-]$/, "an absolute file path such as /etc/icn-bootstrap/registry-ca.crt (letters, digits, . _ - + /)")
  .refine((path) => !path.split("/").some((segment) => segment === "." || segment === ".."), "a path without . or .. segments");
/** cpu and memory as Kubernetes quantities, e.g. { cpu: 500m, memory: 256Mi }. */
const Quantity = z.string().regex(QUANTITY_PATTERN, "a Kubernetes quantity such as 500m, 1 or 256Mi");
const ResourceList = z.object({ cpu: Quantity.optional(), memory: Quantity.optional() }).strict();
/** A ConfigMap data key. */
const ConfigMapKey = z
  .string()
  .regex(/^[-._a-zA-Z0-9]+$/, "a ConfigMap key such as ca.crt")
  .max(253);

const MirrorEntry = z.object({ prefix: z.string().min(1), mirrors: z.array(Mirror).min(1) }).strict();

/** Registries whose images the appliance's registry holds, mirrored for every node. */
export const MIRRORED_REGISTRIES = ["docker.io", "registry.k8s.io", "quay.io", "ghcr.io", "gcr.io"] as const;

export const ConfigSchema = z
  .object({
    /** Image of the kubespray runner (install Job and, by default, the agents). */
    runnerImage: ImageRef,
    /** Image of the provisioning-agent pods; defaults to runnerImage. */
    agentImage: ImageRef.optional(),
    /** The appliance's registry, as the compute nodes reach it. */
    registryHost: HostPort,
    /** The appliance's file server root with kubespray's offline files tree. */
    filesRepo: HttpUrl,
    /**
     * Removed (issue 19): the appliance's registry speaks only TLS, verified with the site
     * CA (registryCA). `false` is accepted for old files; `true` is refused with the fix.
     */
    registryInsecure: z
      .literal(false, {
        errorMap: () => ({ message: "plain HTTP to the registry is gone: it speaks only TLS with the site CA (see registryCA); delete registryInsecure" }),
      })
      .optional(),
    /**
     * The site CA that signs the registry's certificate (made at the appliance's first boot):
     * read from this ConfigMap in the operator's namespace, written to nodePath on every node.
     */
    registryCA: z
      .object({
        configMap: DnsName.default("icn-registry-ca"),
        key: ConfigMapKey.default("ca.crt"),
        nodePath: NodePath.default("/etc/icn-bootstrap/registry-ca.crt"),
      })
      .strict()
      .default({}),
    /**
     * What the appliance serves to kubespray (versions and sha256; common/kubespray-pins.ts):
     * the build's ConfigMap in the operator's namespace. Every Job gets it beside its
     * inventory; its Kubernetes versions are the ones a Provisioning may name.
     */
    kubesprayPins: z
      .object({ configMap: DnsName.default(KUBESPRAY_PINS_CONFIGMAP), key: ConfigMapKey.default(KUBESPRAY_PINS_KEY) })
      .strict()
      .default({}),
    /** The addons the appliance serves (common/addons-catalog.ts): the build's ConfigMap in the operator's namespace. */
    addonsCatalog: z
      .object({ configMap: DnsName.default(ADDONS_CATALOG_CONFIGMAP), key: ConfigMapKey.default(ADDONS_CATALOG_KEY) })
      .strict()
      .default({}),
    /**
     * The address at which pods on the appliance reach its registry: the addons Job's
     * hostAliases give it the registry's name from the chart references (its certificate
     * names that host). Unset: the name is resolved by the cluster's DNS.
     */
    addonsRegistryIP: z.string().ip({ version: "v4" }).optional(),
    /** kubespray *_image_repo overrides; each defaults to registryHost. */
    imageRepos: z
      .object({
        kube_image_repo: z.string().min(1).optional(),
        gcr_image_repo: z.string().min(1).optional(),
        github_image_repo: z.string().min(1).optional(),
        docker_image_repo: z.string().min(1).optional(),
        quay_image_repo: z.string().min(1).optional(),
      })
      .strict()
      .default({}),
    /** containerd_registries_mirrors; defaults to the appliance's registry for MIRRORED_REGISTRIES. */
    containerdMirrors: z.array(MirrorEntry).optional(),
    /**
     * The Kubernetes versions a Provisioning may name, any order; one naming another gets
     * Invalid with this list, one naming none gets the newest. Unset (the appliance's
     * setting): the versions the kubespray pins serve.
     */
    kubernetesVersions: z
      .array(z.string().regex(/^\d+\.\d+\.\d+$/, "a Kubernetes version such as 1.35.4"))
      .min(1)
      .optional(),
    /** Extra kubespray variables, written as they are into the group_vars file. */
    extraVars: z.record(z.unknown()).default({}),
    /** The user kubespray logs in as on the compute nodes. */
    sshUser: z
      .string()
      .regex(/^[a-z_][a-z0-9_-]*$/, "a Unix user name")
      .default("root"),
    /** The kubespray playbook the runner runs. */
    playbook: z
      .string()
      .regex(/^[\w./-]+\.ya?ml$/, "a playbook file name such as cluster.yml")
      .default("cluster.yml"),
    /** Namespace of the operator itself (leader-election Lease). */
    namespace: Namespace.default("bpa-system"),
    /** Only watch this namespace; empty means all namespaces. */
    watchNamespace: z.union([Namespace, z.literal("")]).default(""),
    /** Take BareMetalHosts from this namespace; empty means the Provisioning's own namespace. */
    hostNamespace: z.union([Namespace, z.literal("")]).default(""),
    /** Name of the per-namespace SSH key Secret the operator creates when absent. */
    sshKeySecret: DnsName.default("bpa-ssh-key"),
    job: z
      .object({
        backoffLimit: z.number().int().min(0).max(10).default(0),
        activeDeadlineSeconds: z
          .number()
          .int()
          .min(60)
          .default(4 * 3600),
        /** Finished install Jobs kept per Provisioning (older ones are deleted). */
        historyLimit: z.number().int().min(1).max(20).default(3),
        /**
         * Ansible's strategy in the runner (BPA_ANSIBLE_STRATEGY): Mitogen's keeps one Python
         * interpreter per node for the whole run; linear and free are Ansible's own.
         */
        ansibleStrategy: z.enum(["mitogen_linear", "mitogen_free", "linear", "free"]).default("mitogen_linear"),
        /**
         * The runner container's resources. Requests by default: without them the Job is
         * BestEffort, and its cgroup's CPU weight (1) against the appliance's control plane
         * (tens) starved Ansible on a busy appliance: measured under emulation, 8 s a task
         * and 30-40 s for a set_fact.
         */
        resources: z
          .object({
            requests: ResourceList.default({ cpu: "500m", memory: "256Mi" }),
            limits: ResourceList.optional(),
          })
          .strict()
          .default({}),
      })
      .strict()
      .default({}),
    leaderElection: z
      .object({
        enabled: z.boolean().default(true),
        leaseName: DnsName.default("bpa-operator-leader"),
        leaseDurationSeconds: z.number().int().min(2).default(15),
        renewDeadlineSeconds: z.number().int().min(1).default(10),
        retryPeriodSeconds: z.number().min(0.1).default(2),
      })
      .strict()
      .default({}),
    /** Concurrent reconciles (different Provisionings). */
    workers: z.number().int().min(1).max(16).default(2),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.leaderElection.renewDeadlineSeconds >= c.leaderElection.leaseDurationSeconds) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        path: ["leaderElection", "renewDeadlineSeconds"],
        message: "must be shorter than leaseDurationSeconds",
      });
    }
  });

export type BpaConfigInput = z.input<typeof ConfigSchema>;
export type BpaConfig = z.output<typeof ConfigSchema> & {
  agentImage: string;
  containerdMirrors: z.output<typeof MirrorEntry>[];
};

/** Environment variables and the field each one sets. */
export const ENV_FIELDS: Record<string, keyof BpaConfigInput> = {
  BPA_RUNNER_IMAGE: "runnerImage",
  BPA_AGENT_IMAGE: "agentImage",
  BPA_REGISTRY_HOST: "registryHost",
  BPA_FILES_REPO: "filesRepo",
  BPA_SSH_USER: "sshUser",
  BPA_NAMESPACE: "namespace",
  BPA_WATCH_NAMESPACE: "watchNamespace",
  BPA_HOST_NAMESPACE: "hostNamespace",
  BPA_ADDONS_REGISTRY_IP: "addonsRegistryIP",
};

function describePath(path: (string | number)[]): string {
  return path.length ? path.join(".") : "(top level)";
}

/** Validates a configuration object; throws UserError naming each bad field and its source. */
export function parseConfig(raw: unknown, source: string): BpaConfig {
  const result = ConfigSchema.safeParse(raw ?? {});
  if (!result.success) {
    const env = Object.fromEntries(Object.entries(ENV_FIELDS).map(([k, v]) => [v, k]));
    const problems = result.error.issues.map((issue) => {
      const field = describePath(issue.path);
      const hint = env[String(issue.path[0])] ? ` (or env ${env[String(issue.path[0])]})` : "";
      return `  ${field}${hint}: ${issue.message}`;
    });
    throw new UserError(
      `${source} is not a valid BPA operator configuration:\n${problems.join("\n")}`,
      "set the fields listed above (bpa/README.md lists every field)",
    );
  }
  const c = result.data;
  const containerdMirrors = c.containerdMirrors ?? applianceMirrors(c.registryHost, c.registryCA.nodePath);
  return { ...c, agentImage: c.agentImage ?? c.runnerImage, containerdMirrors };
}

/**
 * The default containerd_registries_mirrors: every MIRRORED_REGISTRIES entry and the
 * registry itself go to https://<registryHost>, verified with the site CA at `caPath`.
 */
export function applianceMirrors(registryHost: string, caPath: string): z.output<typeof MirrorEntry>[] {
  return [...MIRRORED_REGISTRIES, registryHost].map((prefix) => ({
    prefix,
    mirrors: [{ host: `https://${registryHost}`, capabilities: ["pull", "resolve"], skip_verify: false, ca: caPath }],
  }));
}

/**
 * Reads the configuration: the YAML file at `file` (if given), then environment
 * overrides (ENV_FIELDS; POD_NAMESPACE also sets `namespace` when BPA_NAMESPACE is unset).
 */
export function loadConfig(options: { file?: string; env?: NodeJS.ProcessEnv; overrides?: BpaConfigInput | Record<string, unknown> } = {}): BpaConfig {
  const env = options.env ?? process.env;
  let raw: Record<string, unknown> = {};
  const sources: string[] = [];
  if (options.file) {
    let text: string;
    try {
      text = readFileSync(options.file, "utf8");
    } catch (error) {
      throw new UserError(
        `cannot read the BPA configuration ${options.file}: ${(error as Error).message}`,
        "pass --config with a readable YAML file, or set BPA_* environment variables",
      );
    }
    try {
      raw = (yaml.load(text, { filename: options.file }) as Record<string, unknown>) ?? {};
    } catch (error) {
      throw new UserError(`${options.file}: not valid YAML: ${(error as Error).message}`, "fix the YAML syntax at the line shown");
    }
    if (typeof raw !== "object" || Array.isArray(raw)) {
      throw new UserError(`${options.file}: expected a mapping of configuration fields`, "see bpa/README.md for the fields");
    }
    sources.push(options.file);
  }
  if (env.POD_NAMESPACE && !env.BPA_NAMESPACE) raw = { ...raw, namespace: env.POD_NAMESPACE };
  for (const [name, field] of Object.entries(ENV_FIELDS)) {
    const value = env[name];
    if (value !== undefined && value !== "") {
      raw = { ...raw, [field]: value };
      sources.push(name);
    }
    // An explicitly empty namespace filter means "all namespaces".
    if (value === "" && (field === "watchNamespace" || field === "hostNamespace")) raw = { ...raw, [field]: "" };
  }
  if (options.overrides) raw = { ...raw, ...options.overrides };
  return parseConfig(raw, sources.length ? `the configuration (${sources.join(", ")})` : "the configuration");
}
