/**
 * The release's credentials and site CA, made and kept by `icn-bootstrap deploy` with the
 * Kubernetes API before Helm runs, never rendered by the chart: Helm keeps every rendered
 * manifest in its release history, so whoever reads those records would read every key
 * and password the chart rendered. What the appliance's first boot makes on the machine
 * (icn-registry-pki, with openssl as here): the site CA (Secret icn-site-ca, its
 * certificate in ConfigMap icn-registry-ca), the REST API's certificate (bpa-api-tls), the
 * registry's push account (icn-registry-push, the admin's), the REST API's own registry
 * account (icn-registry-api), Ironic's credentials and, with the chart's own registry, its
 * front (certificate and password file, icn-registry-front). Each is made once and kept;
 * a certificate is issued again when its names or its CA change.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ApiException, CoreV1Api, type KubeConfig, type V1ConfigMap, type V1Namespace, type V1Secret } from "@kubernetes/client-node";
import { execa } from "execa";
import { UserError } from "./errors.js";

/** The chart's own namespace: the release, its Secrets and (by default) a CA of the site's own live there. */
export const CHART_NAMESPACE = "bpa-system";

/** The registry accounts: the admin's push account, the REST API's, and the one `deploy --images` fills the chart's registry with. */
export const REGISTRY_ACCOUNTS = {
  push: { secret: "icn-registry-push", user: "icn-push" },
  api: { secret: "icn-registry-api", user: "icn-api" },
  /** No Secret: a new password at every `deploy --images`, held only by that deploy (its hash in the front's password file). */
  seed: { user: "icn-seed" },
} as const;

const SITE_CA = "icn-site-ca";
const REGISTRY_CA_CONFIGMAP = "icn-registry-ca";
const API_TLS = "bpa-api-tls";
const REGISTRY_FRONT = "icn-registry-front";
const IRONIC = { namespace: "baremetal-operator-system", name: "ironic-credentials", user: "metal3" };
const CERTIFICATE_FOR = "icn.akraino.org/certificate-for";
const HTPASSWD_FOR = "icn.akraino.org/htpasswd-for";

/** The values these depend on (the chart's defaults and the given values, as Helm merges them). */
export interface SecretValues {
  registry: { address: string };
  nodeFacingAddress: string;
  api: { certificateNames: string[]; certificateAddresses: string[] };
  serve: { registry: { enabled: boolean; certificateNames: string[]; certificateAddresses: string[] } };
  secrets: { caFrom: { namespace: string; name: string } };
}

export interface Pem {
  crt: string;
  key: string;
}

/**
 * A CA of the site's own (secrets.caFrom), read before anything is applied. Only from the
 * chart's namespace, or from the one the deploy's own command line names (`--ca-namespace`):
 * values alone never copy a Secret out of another namespace.
 */
export async function readCaFrom(kc: KubeConfig, values: SecretValues, allowedNamespace?: string): Promise<Pem | undefined> {
  const { name } = values.secrets.caFrom;
  const namespace = values.secrets.caFrom.namespace || CHART_NAMESPACE;
  if (!name) {
    if (values.secrets.caFrom.namespace)
      throw new UserError(`secrets.caFrom.namespace ${namespace} without secrets.caFrom.name`, "name the CA's Secret (secrets.caFrom.name), or leave both out");
    return undefined;
  }
  if (namespace !== CHART_NAMESPACE && namespace !== allowedNamespace)
    throw new UserError(
      `secrets.caFrom.namespace ${namespace}: deploy copies a CA only from ${CHART_NAMESPACE}, or from the namespace its --ca-namespace option names; nothing was applied`,
      `create the CA's Secret in ${CHART_NAMESPACE} (kubectl -n ${CHART_NAMESPACE} create secret tls ${name} --cert ca.crt --key ca.key), or run deploy with --ca-namespace ${namespace} if that namespace is meant`,
    );
  const secret = await readSecret(kc.makeApiClient(CoreV1Api), namespace, name);
  const crt = decode(secret, "tls.crt");
  const key = decode(secret, "tls.key");
  if (!crt || !key)
    throw new UserError(
      `secrets.caFrom: no Secret ${namespace}/${name} with tls.crt and tls.key in the cluster; nothing was applied`,
      `create it: kubectl -n ${namespace} create secret tls ${name} --cert ca.crt --key ca.key`,
    );
  return { crt, key };
}

export interface KeepRequest {
  values: SecretValues;
  /** The chart's namespaces as the release renders them: made first (with Helm's ownership, for the release to take them over). */
  namespaces: V1Namespace[];
  release: string;
  caFrom?: Pem;
  /** The seeding account's password for this deploy (`--images` into the chart's own registry). */
  seedPassword?: string;
  log: (message: string) => void;
}

export async function keepSiteSecrets(kc: KubeConfig, request: KeepRequest): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  for (const namespace of request.namespaces) await keepNamespace(core, namespace, request.release);
  const dir = await mkdtemp(join(tmpdir(), "icn-deploy-pki-"));
  try {
    const pki = new Pki(dir);
    const v = request.values;
    const existingCa = await readSecret(core, CHART_NAMESPACE, SITE_CA);
    let ca: Pem;
    if (request.caFrom) ca = request.caFrom;
    else if (existingCa && decode(existingCa, "tls.crt") && decode(existingCa, "tls.key"))
      ca = { crt: decode(existingCa, "tls.crt")!, key: decode(existingCa, "tls.key")! };
    else {
      ca = await pki.ca("ICN site CA");
      request.log("site CA made (Secret bpa-system/icn-site-ca)");
    }
    await put(core, secret(CHART_NAMESPACE, SITE_CA, "kubernetes.io/tls", { "tls.crt": ca.crt, "tls.key": ca.key }), request.log);
    await putConfigMap(core, { metadata: { name: REGISTRY_CA_CONFIGMAP, namespace: CHART_NAMESPACE }, data: { "ca.crt": ca.crt } }, request.log);

    const apiNames = ["bpa-api", "bpa-api.bpa-system", "bpa-api.bpa-system.svc", "bpa-api.bpa-system.svc.cluster.local", ...v.api.certificateNames];
    await keepCertificate(core, pki, ca, API_TLS, "bpa-api", apiNames, v.api.certificateAddresses, {}, request.log);

    const passwords: Record<string, string> = {};
    for (const account of [REGISTRY_ACCOUNTS.push, REGISTRY_ACCOUNTS.api])
      passwords[account.user] = await keepAccount(core, CHART_NAMESPACE, account.secret, "kubernetes.io/basic-auth", account.user, request.log);
    await keepAccount(core, IRONIC.namespace, IRONIC.name, "Opaque", IRONIC.user, request.log);

    if (v.serve.registry.enabled) {
      const names = ["bootstrap.icn"];
      const addresses = [v.registry.address];
      if (/^[0-9.]+$/.test(v.nodeFacingAddress)) addresses.push(v.nodeFacingAddress);
      else names.push(v.nodeFacingAddress);
      names.push(...v.serve.registry.certificateNames);
      addresses.push(...v.serve.registry.certificateAddresses);
      if (request.seedPassword) passwords[REGISTRY_ACCOUNTS.seed.user] = request.seedPassword;
      const accounts = Object.entries(passwords).sort(([a], [b]) => a.localeCompare(b));
      const htpasswdFor = digest(accounts.map(([user, password]) => `${user}:${password}`).join("\n"));
      const front = await readSecret(core, CHART_NAMESPACE, REGISTRY_FRONT);
      const keep = front?.metadata?.annotations?.[HTPASSWD_FOR] === htpasswdFor ? decode(front, "htpasswd") : undefined;
      const htpasswd = keep ?? (await Promise.all(accounts.map(async ([user, password]) => `${user}:${await pki.crypt(password)}\n`))).join("");
      await keepCertificate(core, pki, ca, REGISTRY_FRONT, "bootstrap.icn", names, [...new Set(addresses.filter(Boolean))], { htpasswd }, request.log, {
        [HTPASSWD_FOR]: htpasswdFor,
      });
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A namespace of the chart, made with the labels the release gives it and Helm's ownership; one already there is left as it is. */
async function keepNamespace(core: CoreV1Api, namespace: V1Namespace, release: string): Promise<void> {
  const name = namespace.metadata!.name!;
  try {
    await core.readNamespace({ name });
    return;
  } catch (error) {
    if (!(error instanceof ApiException && error.code === 404)) throw error;
  }
  await core.createNamespace({
    body: {
      metadata: {
        name,
        labels: { ...namespace.metadata?.labels, "app.kubernetes.io/managed-by": "Helm" },
        annotations: { ...namespace.metadata?.annotations, "meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": CHART_NAMESPACE },
      },
    },
  });
}

/** A certificate from the CA in a Secret of its own; kept while its names and CA are the same. */
async function keepCertificate(
  core: CoreV1Api,
  pki: Pki,
  ca: Pem,
  name: string,
  commonName: string,
  names: string[],
  addresses: string[],
  more: Record<string, string>,
  log: (message: string) => void,
  annotations: Record<string, string> = {},
): Promise<void> {
  // The digest the chart's templates used: a certificate they issued is kept.
  const wanted = digest(`${names.join(",")} ${addresses.join(",")} ${createHash("sha256").update(ca.crt).digest("hex")}`);
  const existing = await readSecret(core, CHART_NAMESPACE, name);
  let crt = decode(existing, "tls.crt");
  let key = decode(existing, "tls.key");
  if (existing?.metadata?.annotations?.[CERTIFICATE_FOR] !== wanted || !crt || !key) {
    ({ crt, key } = await pki.issue(ca, commonName, names, addresses));
    log(`certificate ${CHART_NAMESPACE}/${name} issued for ${[...names, ...addresses].join(", ")}`);
  }
  const body = secret(CHART_NAMESPACE, name, name === API_TLS ? "kubernetes.io/tls" : "Opaque", { "tls.crt": crt, "tls.key": key, ...more });
  body.metadata!.annotations = { [CERTIFICATE_FOR]: wanted, ...annotations };
  await put(core, body, log);
}

/** An account's Secret (username, a random password), made once; returns its password. */
async function keepAccount(core: CoreV1Api, namespace: string, name: string, type: string, user: string, log: (message: string) => void) {
  const existing = await readSecret(core, namespace, name);
  const password = decode(existing, "password") || randomAlphanumeric(32);
  await put(core, secret(namespace, name, type, { username: user, password }), log);
  return password;
}

function secret(namespace: string, name: string, type: string, data: Record<string, string>): V1Secret {
  return {
    metadata: { name, namespace },
    type,
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  };
}

/** Creates the Secret, or replaces one whose content differs (the type of a Secret cannot change: one of another type is made anew). */
async function put(core: CoreV1Api, body: V1Secret, log: (message: string) => void): Promise<void> {
  const { namespace, name } = body.metadata as { namespace: string; name: string };
  const current = await core.readNamespacedSecret({ namespace, name }).catch((error: unknown) => {
    if (error instanceof ApiException && error.code === 404) return undefined;
    throw error;
  });
  if (!current) {
    await core.createNamespacedSecret({ namespace, body });
    log(`Secret ${namespace}/${name} made`);
    return;
  }
  const same =
    current.type === body.type &&
    sameMap(current.data, body.data) &&
    sameMap(current.metadata?.annotations, body.metadata?.annotations) &&
    sameMap(current.metadata?.labels, body.metadata?.labels);
  if (same) return;
  if (current.type !== body.type) {
    await core.deleteNamespacedSecret({ namespace, name });
    await core.createNamespacedSecret({ namespace, body });
  } else
    await core.replaceNamespacedSecret({
      namespace,
      name,
      body: { ...body, metadata: { ...body.metadata, resourceVersion: current.metadata?.resourceVersion } },
    });
  log(`Secret ${namespace}/${name} updated`);
}

async function putConfigMap(core: CoreV1Api, body: V1ConfigMap, log: (message: string) => void): Promise<void> {
  const { namespace, name } = body.metadata as { namespace: string; name: string };
  const current = await core.readNamespacedConfigMap({ namespace, name }).catch((error: unknown) => {
    if (error instanceof ApiException && error.code === 404) return undefined;
    throw error;
  });
  if (!current) await core.createNamespacedConfigMap({ namespace, body });
  else if (!sameMap(current.data, body.data) || !sameMap(current.metadata?.labels, body.metadata?.labels))
    await core.replaceNamespacedConfigMap({
      namespace,
      name,
      body: { ...body, metadata: { ...body.metadata, resourceVersion: current.metadata?.resourceVersion } },
    });
  else return;
  log(`ConfigMap ${namespace}/${name} written`);
}

async function readSecret(core: CoreV1Api, namespace: string, name: string): Promise<V1Secret | undefined> {
  try {
    return await core.readNamespacedSecret({ namespace, name });
  } catch (error) {
    if (error instanceof ApiException && error.code === 404) return undefined;
    if (error instanceof ApiException && error.code === 403)
      throw new UserError(`the kubeconfig's user may not read Secret ${namespace}/${name}; nothing was applied`, "deploy as a cluster administrator");
    throw error;
  }
}

function decode(secret: V1Secret | undefined, key: string): string | undefined {
  const value = secret?.data?.[key];
  return value === undefined ? undefined : Buffer.from(value, "base64").toString();
}

/** Letters and digits only: a password that survives any quoting (a URL, a shell, a values file). */
export function randomAlphanumeric(length: number): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  let out = "";
  while (out.length < length) for (const byte of randomBytes(length)) if (byte < 248 && out.length < length) out += alphabet[byte % 62];
  return out;
}

function sameMap(a: Record<string, string> | undefined, b: Record<string, string> | undefined): boolean {
  const sorted = (m: Record<string, string> | undefined) => JSON.stringify(Object.entries(m ?? {}).sort(([x], [y]) => x.localeCompare(y)));
  return sorted(a) === sorted(b);
}

const digest = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 16);

/** openssl in a private directory (mode 0700, removed by the caller): keys never on a command line. */
class Pki {
  private n = 0;
  constructor(private readonly dir: string) {}

  private async openssl(args: string[], input?: string): Promise<string> {
    const result = await execa("openssl", args, { cwd: this.dir, input, reject: false });
    if (result.exitCode !== 0) throw new Error(`openssl ${args[0]} failed: ${String(result.stderr).trim()}`);
    return String(result.stdout);
  }

  async ca(subject: string): Promise<Pem> {
    await this.openssl([
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "3650",
      "-keyout", "ca.key", "-out", "ca.crt", "-subj", `/CN=${subject}`,
      "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    ]); // prettier-ignore
    return { crt: await readFile(join(this.dir, "ca.crt"), "utf8"), key: await readFile(join(this.dir, "ca.key"), "utf8") };
  }

  async issue(ca: Pem, commonName: string, names: string[], addresses: string[]): Promise<Pem> {
    const n = ++this.n;
    await writeFile(join(this.dir, `issuer${n}.crt`), ca.crt);
    await writeFile(join(this.dir, `issuer${n}.key`), ca.key, { mode: 0o600 });
    const sans = [...names.map((d) => `DNS:${d}`), ...addresses.map((a) => `IP:${a}`)].join(",");
    await writeFile(
      join(this.dir, `leaf${n}.ext`),
      `subjectAltName=${sans}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=critical,CA:FALSE\n`,
    );
    await this.openssl([
      "req",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-keyout",
      `leaf${n}.key`,
      "-out",
      `leaf${n}.csr`,
      "-subj",
      `/CN=${commonName}`,
    ]);
    await this.openssl([
      "x509", "-req", "-in", `leaf${n}.csr`, "-CA", `issuer${n}.crt`, "-CAkey", `issuer${n}.key`,
      "-set_serial", `0x${randomBytes(16).toString("hex")}`, "-days", "825", "-extfile", `leaf${n}.ext`, "-out", `leaf${n}.crt`,
    ]); // prettier-ignore
    return { crt: await readFile(join(this.dir, `leaf${n}.crt`), "utf8"), key: await readFile(join(this.dir, `leaf${n}.key`), "utf8") };
  }

  /** A password as nginx's password file holds it (SHA-512 crypt, as the appliance's), the password on stdin. */
  async crypt(password: string): Promise<string> {
    return (await this.openssl(["passwd", "-6", "-stdin"], password)).trim();
  }
}
