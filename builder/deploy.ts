/**
 * `icn-bootstrap deploy`: the infra-local-controller chart onto a Kubernetes cluster of
 * one's own, by the pinned Helm (docs/developer-path.md). Everything that can be checked
 * before anything is applied is: the cluster answers, its version, the caller's
 * permissions (named), and a server-side dry run of the whole release (values, schemas,
 * admission). Then the release's Secrets are made or kept with the Kubernetes API
 * (builder/deploy-secrets.ts: never in Helm's release history), the release is installed or
 * upgraded in the chart's own namespace with a short history, and its Deployments are
 * waited for, each reported as it becomes available. Bundles go into the registry given
 * before the release changes, or into the chart's own registry and file server once they run.
 */
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { ApiException, AppsV1Api, AuthorizationV1Api, CoreV1Api, KubeConfig, VersionApi, type V1Namespace } from "@kubernetes/client-node";
import { execa } from "execa";
import yaml from "js-yaml";
import { CONTROLLER_CHART_REPOSITORY } from "../common/controller-chart.js";
import { copyFilesBundle, FILE_SERVER } from "./deploy-files.js";
import { CHART_NAMESPACE, keepSiteSecrets, randomAlphanumeric, readCaFrom, REGISTRY_ACCOUNTS, type SecretValues } from "./deploy-secrets.js";
import { UserError } from "./errors.js";
import { pushImagesBundle, type PushOptions } from "./images-bundle.js";
import { artifactPaths } from "./sources/index.js";

/** The chart's ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) is there from 1.30. */
export const MINIMUM_KUBERNETES = { major: 1, minor: 30 };

/** What the release creates, as `kubectl auth can-i` would ask it. */
const NEEDED: { verb: string; group: string; resource: string; namespace?: string }[] = [
  { verb: "create", group: "apiextensions.k8s.io", resource: "customresourcedefinitions" },
  { verb: "create", group: "", resource: "namespaces" },
  { verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterroles" },
  { verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings" },
  { verb: "create", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies" },
  { verb: "create", group: "", resource: "persistentvolumes" },
  { verb: "create", group: "", resource: "secrets", namespace: "bpa-system" },
  { verb: "get", group: "", resource: "secrets", namespace: "bpa-system" },
  { verb: "update", group: "", resource: "secrets", namespace: "bpa-system" },
  { verb: "create", group: "", resource: "secrets", namespace: "baremetal-operator-system" },
  { verb: "create", group: "apps", resource: "deployments", namespace: "bpa-system" },
  { verb: "create", group: "apps", resource: "deployments", namespace: "baremetal-operator-system" },
];

/** The chart's own registry (serve.registry): its Deployment, and where its CA is. */
const OWN_REGISTRY = { namespace: CHART_NAMESPACE, deployment: "icn-registry", caConfigMap: "icn-registry-ca" } as const;

/** Revisions Helm keeps of the release (each holds the rendered manifest; none holds a key). */
export const HISTORY_MAX = 3;

/** What the release holds, read from the server's dry run: what to wait for, and the site services it runs. */
interface ReleasePlan {
  deployments: { namespace: string; name: string }[];
  /** The chart's namespaces, as it renders them. */
  namespaces: V1Namespace[];
  /** The values the release was rendered with (the chart's defaults and the ones given). */
  values: SecretValues;
  /** The chart's own registry as the compute nodes reach it (bpa-config's registryHost), when it runs one. */
  ownRegistry?: string;
  ownFiles: boolean;
}

export interface DeployRequest {
  kubeconfig: string;
  values?: string;
  chart?: string;
  release: string;
  /** Seconds to wait for the Deployments; 0: do not wait. */
  waitSeconds: number;
  /**
   * An images bundle (`icn-bootstrap bundle`): pushed into `push.registry` before
   * installing (the chart then pulls from there), or without `push` into the chart's own
   * registry once it runs.
   */
  images?: string;
  push?: Omit<PushOptions, "log">;
  /** host:port this machine reaches the chart's own registry at (default: as the compute nodes do). */
  registryAt?: string;
  /** A files bundle (`icn-bootstrap bundle`), unpacked into the chart's own file server once it runs. */
  files?: string;
  /** A namespace other than bpa-system that secrets.caFrom may name (`--ca-namespace`). */
  caNamespace?: string;
  log: (message: string) => void;
}

export async function deploy(request: DeployRequest): Promise<void> {
  const chart = request.chart ? resolve(request.chart) : await builtChart();
  for (const [option, file] of [
    ["--images", request.images],
    ["--files", request.files],
  ] as const)
    if (
      file &&
      !(await stat(file).then(
        (s) => s.isFile(),
        () => false,
      ))
    )
      throw new UserError(
        `deploy: ${option} ${file} is not a file`,
        "write the bundles with './icn-bootstrap bundle' (out/<name>-images.tar, out/<name>-files.tar)",
      );
  const kc = new KubeConfig();
  try {
    kc.loadFromFile(resolve(request.kubeconfig));
  } catch (error) {
    throw new UserError(`--kubeconfig ${request.kubeconfig}: ${(error as Error).message}`, "pass the kubeconfig of the cluster to install on");
  }
  const server = kc.getCurrentCluster()?.server ?? "(no server)";
  const version = await clusterVersion(kc, server);
  request.log(`cluster ${server}: Kubernetes ${version}`);
  await checkPermissions(kc, server);
  request.log("permissions: may create every kind of object the chart holds");

  const helm = (await artifactPaths(["helm"])).helm;
  const args = ["upgrade", "--install", request.release, chart, "--kubeconfig", resolve(request.kubeconfig), "--namespace", CHART_NAMESPACE];
  args.push("--history-max", String(HISTORY_MAX));
  if (request.values) args.push("--values", resolve(request.values));
  if (request.push) args.push("--set", `images.registry=${request.push.registry}`);
  // An earlier deploy kept the release in default, with the Secrets in its history: this one
  // takes its objects over into a release in bpa-system, then removes that history.
  const formerHistory = await formerReleaseHistory(kc, request.release);
  if (formerHistory.length) args.push("--take-ownership");
  const dryRun = await execa(helm, [...args, "--dry-run=server", "--output", "json"], { reject: false });
  if (dryRun.exitCode !== 0)
    throw new UserError(
      `the release was refused before anything was applied: ${helmError(dryRun.stderr)}`,
      "fix what it names (values: docs/developer-path.md, 'Values'), then run deploy again",
    );
  const plan = releasePlan(dryRun.stdout);
  const caFrom = await readCaFrom(kc, plan.values, request.caNamespace);
  request.log(`dry run on the server: ${request.release} accepted`);
  const intoOwnRegistry = Boolean(request.images && !request.push);
  if (intoOwnRegistry && !plan.ownRegistry)
    throw new UserError(
      "deploy: --images without --push-to goes into the chart's own registry, and these values run none; nothing was applied",
      "set serve.registry.enabled: true in the values (docs/developer-path.md), or push into a registry of yours with --push-to REGISTRY",
    );
  if (request.files && !plan.ownFiles)
    throw new UserError(
      "deploy: --files goes into the chart's own file server, and these values run none; nothing was applied",
      "set serve.files.enabled: true in the values (docs/developer-path.md)",
    );
  if ((intoOwnRegistry || request.files) && request.waitSeconds === 0)
    throw new UserError(
      "deploy: --wait 0 with --images or --files into the chart's own registry or file server: they are filled once they run",
      "leave --wait at its default, or give the seconds to wait",
    );
  if (request.images && request.push) {
    request.log(`pushing ${request.images} into ${request.push.registry}`);
    const pushed = await pushImagesBundle(request.images, { ...request.push, log: request.log });
    request.log(`${pushed.length} images and charts in ${request.push.registry}, digests unchanged`);
  }
  // A password for this deploy's pushes into the chart's own registry: the one account that may set the tags the bundle ships.
  const seedPassword = intoOwnRegistry ? randomAlphanumeric(32) : undefined;
  await keepSiteSecrets(kc, { values: plan.values, namespaces: plan.namespaces, release: request.release, caFrom, seedPassword, log: request.log });
  const applied = await execa(helm, args, { reject: false });
  if (applied.exitCode !== 0)
    throw new UserError(
      `helm upgrade --install ${request.release} failed: ${helmError(applied.stderr)}`,
      `see 'helm -n ${CHART_NAMESPACE} status ${request.release}' and 'helm -n ${CHART_NAMESPACE} history ${request.release}'; run deploy again once fixed`,
    );
  request.log(`${request.release} installed (${chart}); helm -n ${CHART_NAMESPACE} status ${request.release} tells its revision`);
  if (formerHistory.length) {
    const core = kc.makeApiClient(CoreV1Api);
    for (const name of formerHistory) await core.deleteNamespacedSecret({ namespace: "default", name });
    request.log(`the release's former history in default (${formerHistory.length} revisions, holding the Secrets the chart made then) removed`);
  }
  if (request.waitSeconds > 0) await waitForDeployments(kc, plan.deployments, request.waitSeconds, request.log);
  if (intoOwnRegistry) await pushIntoOwnRegistry(kc, request.images!, request.registryAt ?? plan.ownRegistry!, seedPassword!, request.log);
  if (request.files) await copyFilesBundle(kc, request.files, request.log);
}

/** The Deployments and site services of the release the server's dry run rendered (`helm ... --output json`). */
export function releasePlan(dryRunJson: string): ReleasePlan {
  const release = JSON.parse(dryRunJson) as { manifest?: string; config?: object; chart?: { values?: object } };
  const objects = yaml.loadAll(release.manifest ?? "") as ({
    kind?: string;
    metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
    data?: Record<string, string>;
  } | null)[];
  const deployments = objects
    .filter((o) => o?.kind === "Deployment")
    .map((o) => ({ namespace: o!.metadata?.namespace ?? "default", name: o!.metadata?.name ?? "" }));
  const has = (namespace: string, name: string) => deployments.some((d) => d.namespace === namespace && d.name === name);
  const config = objects.find((o) => o?.kind === "ConfigMap" && o.metadata?.name === "bpa-config")?.data?.["config.yaml"];
  const registryHost = config ? (yaml.load(config) as { registryHost?: string }).registryHost : undefined;
  return {
    deployments,
    namespaces: objects.filter((o) => o?.kind === "Namespace").map((o) => ({ metadata: { name: o!.metadata?.name, labels: o!.metadata?.labels } })),
    values: coalesce(release.chart?.values ?? {}, release.config ?? {}) as SecretValues,
    ownRegistry: has(OWN_REGISTRY.namespace, OWN_REGISTRY.deployment) ? registryHost : undefined,
    ownFiles: has(FILE_SERVER.namespace, FILE_SERVER.deployment),
  };
}

/** Helm's coalescing of values: the given ones over the chart's defaults, maps merged key by key. */
function coalesce(defaults: object, given: object): object {
  const out: Record<string, unknown> = { ...defaults };
  for (const [key, value] of Object.entries(given)) {
    const base = out[key];
    out[key] =
      value && typeof value === "object" && !Array.isArray(value) && base && typeof base === "object" && !Array.isArray(base) ? coalesce(base, value) : value;
  }
  return out;
}

/** The release's records in default, where deploy kept it before it moved to the chart's namespace. */
async function formerReleaseHistory(kc: KubeConfig, release: string): Promise<string[]> {
  const records = await kc.makeApiClient(CoreV1Api).listNamespacedSecret({ namespace: "default", labelSelector: `owner=helm,name=${release}` });
  return records.items.map((s) => s.metadata!.name!);
}

/**
 * The bundle into the chart's own registry, with this deploy's seeding account (the one
 * account that may set the tags the bundle ships) and the site CA. The registry's front
 * reads its password file from a Secret volume, which the kubelet refreshes within a
 * minute or two: until it takes the account, it is asked again.
 */
async function pushIntoOwnRegistry(kc: KubeConfig, bundle: string, registry: string, password: string, log: (message: string) => void): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const ca = (await core.readNamespacedConfigMap({ namespace: OWN_REGISTRY.namespace, name: OWN_REGISTRY.caConfigMap })).data?.["ca.crt"];
  if (!ca) throw new UserError(`the release has no CA for its registry (ConfigMap ${OWN_REGISTRY.caConfigMap})`, "run deploy again: it makes it");
  await waitForAccount(registry, ca, REGISTRY_ACCOUNTS.seed.user, password, log);
  // The credentials only ever in a private directory of this process, removed afterwards.
  const dir = await mkdtemp(join(tmpdir(), "icn-deploy-push-"));
  try {
    const auth = Buffer.from(`${REGISTRY_ACCOUNTS.seed.user}:${password}`).toString("base64");
    await writeFile(join(dir, "auth.json"), JSON.stringify({ auths: { [registry]: { auth } } }), { mode: 0o600 });
    await writeFile(join(dir, "ca.crt"), ca);
    log(`pushing ${bundle} into the chart's registry at ${registry}`);
    const pushed = await pushImagesBundle(bundle, { registry, authfile: join(dir, "auth.json"), certDir: dir, log });
    log(`${pushed.length} images and charts in ${registry}, digests unchanged`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Asks the registry's version check with the account until it answers 200 (at most 5 minutes). */
async function waitForAccount(registry: string, ca: string, user: string, password: string, log: (message: string) => void): Promise<void> {
  const deadline = Date.now() + 300_000;
  let said = false;
  for (;;) {
    const status = await new Promise<number | string>((done) => {
      const request = httpsRequest(
        `https://${registry}/v2/`,
        { ca, auth: `${user}:${password}`, timeout: 10_000 },
        (response) => (response.resume(), done(response.statusCode ?? 0)),
      );
      request.on("timeout", () => request.destroy(new Error("no answer in 10 s")));
      request.on("error", (error) => done(error.message));
      request.end();
    });
    if (status === 200) return;
    if (Date.now() > deadline)
      throw new UserError(
        `the chart's registry at ${registry} did not take this deploy's account ${user} in 5 minutes (last answer: ${status})`,
        `see 'kubectl -n ${OWN_REGISTRY.namespace} logs deployment/${OWN_REGISTRY.deployment} -c front'; run deploy again with --images`,
      );
    if (!said) log(`waiting for the chart's registry to take this deploy's account ${user} (the kubelet refreshes its password file)`);
    said = true;
    await new Promise((r) => setTimeout(r, 5000));
  }
}

/** The chart the last build wrote beside the images (out/infra-local-controller-<version>.tgz). */
async function builtChart(): Promise<string> {
  const name = CONTROLLER_CHART_REPOSITORY.split("/").pop()!;
  const out = resolve("out");
  const found = (await readdir(out).catch(() => [] as string[])).filter((f) => f.startsWith(`${name}-`) && f.endsWith(".tgz")).sort();
  if (found.length === 0)
    throw new UserError(`no chart in ${out}`, `run './icn-bootstrap build' first (it writes ${join("out", `${name}-<version>.tgz`)}), or pass --chart FILE`);
  return join(out, found.at(-1)!);
}

async function clusterVersion(kc: KubeConfig, server: string): Promise<string> {
  let info;
  try {
    info = await kc.makeApiClient(VersionApi).getCode();
  } catch (error) {
    if (error instanceof ApiException && (error.code === 401 || error.code === 403))
      throw new UserError(
        `${server} refused the kubeconfig's credentials (HTTP ${error.code})`,
        "check the kubeconfig's user (an expired token or certificate?): kubectl --kubeconfig FILE auth whoami",
      );
    throw new UserError(
      `cannot reach the cluster's API server at ${server}: ${(error as Error).message.split("\n")[0]}`,
      "check that the cluster runs and that --kubeconfig names it (kubectl --kubeconfig FILE get nodes)",
    );
  }
  if (!supportedVersion(info.major, info.minor))
    throw new UserError(
      `the cluster runs Kubernetes ${info.gitVersion}; the chart needs ${MINIMUM_KUBERNETES.major}.${MINIMUM_KUBERNETES.minor} or later`,
      "upgrade the cluster, or install on another one",
    );
  return info.gitVersion;
}

/** "1", "30+" (some distributions add a plus) against MINIMUM_KUBERNETES. */
export function supportedVersion(major: string, minor: string): boolean {
  const [ma, mi] = [Number.parseInt(major, 10), Number.parseInt(minor, 10)];
  if (!Number.isFinite(ma) || !Number.isFinite(mi)) return false;
  return ma > MINIMUM_KUBERNETES.major || (ma === MINIMUM_KUBERNETES.major && mi >= MINIMUM_KUBERNETES.minor);
}

async function checkPermissions(kc: KubeConfig, server: string): Promise<void> {
  const authz = kc.makeApiClient(AuthorizationV1Api);
  const missing: string[] = [];
  for (const need of NEEDED) {
    const review = await authz
      .createSelfSubjectAccessReview({
        body: { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectAccessReview", spec: { resourceAttributes: need } },
      })
      .catch((error: unknown) => {
        throw new UserError(
          `${server} refused the kubeconfig's credentials: ${(error as Error).message.split("\n")[0]}`,
          "check the kubeconfig's user (an expired token or certificate?): kubectl --kubeconfig FILE auth whoami",
        );
      });
    if (!review.status?.allowed)
      missing.push(`${need.verb} ${need.resource}${need.group ? `.${need.group}` : ""}${need.namespace ? ` in ${need.namespace}` : ""}`);
  }
  if (missing.length)
    throw new UserError(
      `the kubeconfig's user may not ${missing.join(", ")} on ${server}; nothing was applied`,
      "deploy as a cluster administrator (the chart installs CRDs, ClusterRoles and namespaces)",
    );
}

async function waitForDeployments(kc: KubeConfig, deployments: ReleasePlan["deployments"], seconds: number, log: (message: string) => void): Promise<void> {
  const apps = kc.makeApiClient(AppsV1Api);
  const deadline = Date.now() + seconds * 1000;
  const key = (d: { namespace: string; name: string }) => `${d.namespace}/${d.name}`;
  const ready = new Set<string>();
  for (;;) {
    for (const deployment of deployments) {
      if (ready.has(key(deployment))) continue;
      const d = await apps.readNamespacedDeployment(deployment);
      const wanted = d.spec?.replicas ?? 1;
      if ((d.status?.availableReplicas ?? 0) >= wanted && (d.status?.updatedReplicas ?? 0) >= wanted) {
        ready.add(key(deployment));
        log(`${key(deployment)}: available`);
      }
    }
    if (ready.size === deployments.length) return;
    if (Date.now() > deadline) {
      const waiting = deployments.filter((d) => !ready.has(key(d)));
      const reasons = await Promise.all(waiting.map(({ namespace, name }) => podReasons(kc, namespace, name)));
      throw new UserError(
        `installed, but not available after ${seconds} s: ${waiting.map((d, i) => `${key(d)} (${reasons[i]})`).join("; ")}`,
        "see 'kubectl -n NAMESPACE describe deployment NAME'; a pod that cannot pull its image needs the images in the registry images.registry names",
      );
    }
    await new Promise((r) => setTimeout(r, 5000));
  }
}

/** Why a Deployment's pods are not ready: their waiting reasons, or that none is scheduled. */
async function podReasons(kc: KubeConfig, namespace: string, name: string): Promise<string> {
  const pods = await kc.makeApiClient(CoreV1Api).listNamespacedPod({ namespace, labelSelector: `app.kubernetes.io/name=${name}` });
  if (pods.items.length === 0) return "no pod";
  const reasons = pods.items.flatMap((p) => [
    ...(p.status?.containerStatuses ?? []).map((c) => c.state?.waiting?.reason).filter(Boolean),
    ...(p.status?.conditions ?? []).filter((c) => c.type === "PodScheduled" && c.status === "False").map((c) => `unscheduled: ${c.message}`),
  ]);
  return reasons.length ? [...new Set(reasons)].join(", ") : (pods.items[0]!.status?.phase ?? "pending");
}

/** Helm's error from its "Error:" line on, without the prefix: a schema error names each bad key on the lines after it. */
function helmError(stderr: string): string {
  const lines = stderr.trim().split("\n");
  const start = lines.findIndex((l) => l.startsWith("Error:"));
  return (start >= 0 ? lines.slice(start) : lines.slice(-1)).join("\n").replace(/^Error:\s*/, "");
}
