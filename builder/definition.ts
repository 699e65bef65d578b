import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import yaml from "js-yaml";
import { z } from "zod";
import { UserError } from "./errors.js";

export const OUTPUT_FORMATS = ["usb", "qcow2"] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

const sizePattern = /^\d+(\.\d+)?\s*(KiB|MiB|GiB|TiB|K|M|G|T)$/;
const Size = z.string().regex(sizePattern, "a size such as '512MiB' or '4GiB'");
const MIN_SLOT_BYTES = 1024 ** 3;
const DebianPackage = z.string().regex(/^[a-z0-9][a-z0-9+.-]+$/, "a Debian package name");
const Hostname = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$/, "a hostname label (lowercase letters, digits, '-')");
const Cidr = z.string().regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, "an IPv4 address with prefix, e.g. 10.0.0.2/24");
const Ipv4 = z.string().regex(/^\d{1,3}(\.\d{1,3}){3}$/, "an IPv4 address");
/** YAML reads an unquoted 2026-11-06 as a date: both forms are the day, written YYYY-MM-DD. */
const Day = z.preprocess((v) => (v instanceof Date ? v.toISOString().slice(0, 10) : v), z.string().regex(/^\d{4}-\d{2}-\d{2}$/, "a day written YYYY-MM-DD"));

/**
 * The upstream support window of one pinned component's release line, with where it was
 * read: `lock --check` warns from 60 days before the end and reports the pin out of support
 * after it. A window names its line (`series`), so a pin moved to another line is reported
 * as having no window recorded until its own is added.
 */
export const SupportWindow = z
  .object({
    /** What is pinned: artifact:<lock entry>, debian:<package> or pypi:<package>. */
    pin: z.string().regex(/^(artifact|debian|pypi):[A-Za-z0-9][A-Za-z0-9._+-]*$/, "artifact:<lock entry>, debian:<package> or pypi:<package>"),
    /** The release line the window is for, as the start of the pinned version: "2.2" for containerd 2.2.x. */
    series: z.string().regex(/^\d+(\.\d+)*$/, "a release line such as '2.2'"),
    /** The day upstream support ends (or ended). */
    endOfLife: Day,
    /** Where the date comes from (a release policy page or file). */
    source: z.string().url(),
    /** Why the date is what it is, or why the pin stays. */
    note: z.string().optional(),
  })
  .strict();
export type SupportWindow = z.infer<typeof SupportWindow>;

/** The appliance definition (`appliance.yaml`). Every object is strict: unknown keys are errors. */
export const ApplianceDefinition = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, "a file-name-safe image name (lowercase, digits, '.', '_', '-')"),
    debian: z
      .object({
        suite: z.string().min(1),
        packages: z.array(DebianPackage).default([]),
        /** Resolve against `<suite>-updates` too (stable updates between point releases). */
        updates: z.boolean().default(true),
        /** Resolve against the security archive's `<suite>-security` too. */
        security: z.boolean().default(true),
      })
      .strict(),
    console: z
      .object({
        serial: z
          .string()
          .regex(/^ttyS\d+,\d+$/, "a serial console such as 'ttyS0,115200'")
          .default("ttyS0,115200"),
      })
      .strict()
      .default({}),
    network: z
      .object({
        hostnamePrefix: Hostname.default("icn-bootstrap"),
        dhcp: z.boolean().default(true),
        static: z
          .object({ interface: z.string().min(1), address: Cidr, gateway: Ipv4.optional(), dns: z.array(Ipv4).default([]) })
          .strict()
          .optional(),
      })
      .strict()
      .default({}),
    disk: z
      .object({
        /** Free space left in the root filesystem of the image; first boot grows it to the whole disk. */
        rootFree: Size.default("128MiB"),
        espSize: Size.default("64MiB"),
        /** Virtual disk size of the qcow2 VM image (sparse: costs nothing until used); root grows into it at first boot. */
        vmDiskSize: Size.default("32GiB"),
        /**
         * Each of the two system slots (A/B) the first boot lays out on a disk with room for
         * them and a data partition (docs/design.md, "The disk"): the root filesystem must fit.
         */
        slotSize: Size.default("8GiB").refine(
          (size) => !sizePattern.test(size) || parseSize(size) >= MIN_SLOT_BYTES,
          "at least 1GiB (a system slot holds the whole root filesystem)",
        ),
      })
      .strict()
      .default({}),
    kubernetes: z
      .object({
        /** The single-node bootstrap cluster: kubeadm init at first boot, then the BPA. */
        enabled: z.boolean().default(true),
        /**
         * The components (the BPA, Metal3, Ironic) installed at first boot from the
         * infra-local-controller chart. false: a plain single-node Kubernetes (with the
         * registry and the file server) to deploy the chart onto yourself (docs/developer-path.md).
         */
        components: z.boolean().default(true),
        /** Optional check: the version the lock file must pin (it is pinned once, there). */
        version: z
          .string()
          .regex(/^v\d+\.\d+\.\d+$/, "a Kubernetes version such as 'v1.37.1'")
          .optional(),
        /** The API server's address, on a dummy interface: stable whatever DHCP gives the LAN ports. */
        advertiseAddress: Ipv4.default("10.254.254.254"),
        podSubnet: Cidr.default("10.244.0.0/16"),
        serviceSubnet: Cidr.default("10.96.0.0/12"),
      })
      .strict()
      .default({}),
    access: z
      .object({
        /** Public keys allowed to log in as root over SSH (password login stays disabled). */
        sshAuthorizedKeys: z.array(z.string().regex(/^(ssh|ecdsa|sk)-[a-z0-9-]+ [A-Za-z0-9+/=]+( .*)?$/, "an OpenSSH public key line")).default([]),
      })
      .strict()
      .default({}),
    /** Upgrading in place (docs/upgrade.md): which signatures an image of the next version must carry, how long it may take to come back healthy. */
    upgrade: z
      .object({
        /** PEM public keys (ECDSA P-256) whose signature an upgrade image's build report must carry: the public half of `build --sign-key`. */
        trustedKeys: z
          .array(
            z
              .string()
              .regex(/^-----BEGIN PUBLIC KEY-----\n[A-Za-z0-9+/=\n]+-----END PUBLIC KEY-----\n?$/, "a PEM public key ('openssl pkey -in sign.key -pubout')"),
          )
          .default([]),
        /** How long a newly written slot may take to come back healthy before the appliance boots the old one again. */
        healthTimeout: z
          .string()
          .regex(/^\d+(s|m|h)$/, "a duration such as '1800s', '30m' or '1h'")
          .default("30m"),
      })
      .strict()
      .default({}),
    /** Extra overlay directories (relative to the definition file), applied after the built-in overlays/. */
    overlays: z.array(z.string().min(1)).default([]),
    /** The local registry's content (registry-seed/, images/). */
    registry: z
      .object({
        /** default: images built from images/ recipes; upstream: pulled by digest with skopeo where the list pins an upstream digest. */
        profile: z.enum(["default", "upstream"]).default("default"),
        /** Image lists (relative to the repository), pinned by digest. */
        lists: z.array(z.string().min(1)).default(["registry-seed/bootstrap.yaml", "registry-seed/application.yaml", "registry-seed/addons.yaml"]),
      })
      .strict()
      .default({}),
    /**
     * Disk images for the compute nodes (images/<name>/recipe.yaml with `os:`), built from
     * their pinned Debian sets and served by the file server under os-images/.
     */
    osImages: z.array(z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, "an image recipe's name (images/<name>/)")).default([]),
    /** kubespray for the application clusters: its release tarball (lock file: artifacts.kubespray) and the runner image. */
    kubespray: z
      .object({
        enabled: z.boolean().default(true),
        /**
         * Kubernetes versions served to application clusters besides the lock's, so a cluster
         * can be installed at one and upgraded to another: each needs its lock entry
         * (icn-bootstrap lock-artifacts --also-kubernetes V) and its control-plane images
         * (registry-seed/kubernetes-V.yaml in registry.lists).
         */
        extraKubernetesVersions: z.array(z.string().regex(/^v\d+\.\d+\.\d+$/, "a Kubernetes release such as v1.35.3")).default([]),
      })
      .strict()
      .default({}),
    /** Upstream support windows of the pinned components (lock --check). */
    support: z.array(SupportWindow).default([]),
    outputs: z
      .object({
        formats: z
          .array(z.enum(OUTPUT_FORMATS))
          .min(1)
          .default([...OUTPUT_FORMATS]),
      })
      .strict()
      .default({}),
  })
  .strict();

export type ApplianceDefinition = z.infer<typeof ApplianceDefinition>;

export const DEFAULT_DEFINITION = resolve(import.meta.dirname, "..", "appliance.yaml");

/** The image list of an extra served Kubernetes version's control-plane images. */
export const extraKubernetesList = (version: string) => `registry-seed/kubernetes-${version}.yaml`;

/** The definition serving these Kubernetes versions besides the lock's: the versions, and their control-plane image lists. */
export function withExtraKubernetes(definition: ApplianceDefinition, versions: string[]): ApplianceDefinition {
  const add = <T>(list: T[], items: T[]) => [...list, ...items.filter((i) => !list.includes(i))];
  return {
    ...definition,
    kubespray: { ...definition.kubespray, extraKubernetesVersions: add(definition.kubespray.extraKubernetesVersions, versions) },
    registry: { ...definition.registry, lists: add(definition.registry.lists, versions.map(extraKubernetesList)) },
  };
}

export function parseDefinition(text: string, source: string): ApplianceDefinition {
  let raw: unknown;
  try {
    raw = yaml.load(text, { filename: source });
  } catch (error) {
    throw new UserError(`${source}: not valid YAML: ${(error as Error).message}`, "fix the YAML syntax at the line shown");
  }
  const result = ApplianceDefinition.safeParse(raw ?? {});
  if (!result.success) {
    const problems = result.error.issues.map((issue) => `  ${describePath(issue.path)}: ${describeIssue(issue)}`);
    throw new UserError(
      `${source} is not a valid appliance definition:\n${problems.join("\n")}`,
      "correct the fields listed above (see appliance.yaml in the repository for every field with its default)",
    );
  }
  return result.data;
}

export async function loadDefinition(path: string = DEFAULT_DEFINITION): Promise<ApplianceDefinition> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new UserError(
      `cannot read appliance definition ${path}: ${(error as NodeJS.ErrnoException).code ?? error}`,
      "pass an existing file with --definition, or omit it to use the default appliance.yaml",
    );
  }
  return parseDefinition(text, path);
}

function describePath(path: (string | number)[]): string {
  if (path.length === 0) return "(top level)";
  return path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");
}

function describeIssue(issue: z.ZodIssue): string {
  switch (issue.code) {
    case "unrecognized_keys":
      return `unknown key${issue.keys.length > 1 ? "s" : ""} ${issue.keys.map((k) => `'${k}'`).join(", ")}`;
    case "invalid_type":
      return issue.received === "undefined" ? `required field missing (expected ${issue.expected})` : `expected ${issue.expected}, got ${issue.received}`;
    case "invalid_enum_value":
      return `expected one of ${issue.options.map((o) => `'${String(o)}'`).join(", ")}, got '${String(issue.received)}'`;
    case "invalid_string":
      return `expected ${issue.message}`;
    default:
      return issue.message;
  }
}

export function parseSize(size: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*([KMGT])/.exec(size);
  if (!match) throw new UserError(`not a size: ${size}`, "use a size such as '512MiB'");
  const power = "KMGT".indexOf(match[2]!) + 1;
  return Math.round(Number(match[1]) * 1024 ** power);
}
