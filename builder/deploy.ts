/**
 * `icn-bootstrap deploy`: the infra-local-controller chart onto a Kubernetes cluster of
 * one's own, by the pinned Helm (docs/developer-path.md). Everything that can be checked
 * before anything is applied is: the cluster answers, its version, the caller's
 * permissions (named), and a server-side dry run of the whole release (values, schemas,
 * admission). Then the release is installed or upgraded, and its Deployments are waited
 * for, each reported as it becomes available.
 */
import { readdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { ApiException, AppsV1Api, AuthorizationV1Api, CoreV1Api, KubeConfig, VersionApi } from "@kubernetes/client-node";
import { execa } from "execa";
import { CONTROLLER_CHART_REPOSITORY } from "../common/controller-chart.js";
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
  { verb: "create", group: "apps", resource: "deployments", namespace: "bpa-system" },
  { verb: "create", group: "apps", resource: "deployments", namespace: "baremetal-operator-system" },
];

const DEPLOYMENTS = [
  ["bpa-system", "bpa-operator"],
  ["bpa-system", "bpa-api"],
  ["baremetal-operator-system", "baremetal-operator"],
  ["baremetal-operator-system", "ironic"],
] as const;

export interface DeployRequest {
  kubeconfig: string;
  values?: string;
  chart?: string;
  release: string;
  /** Seconds to wait for the Deployments; 0: do not wait. */
  waitSeconds: number;
  /** An images bundle (`icn-bootstrap bundle`) to push into `push.registry` before installing; the chart then pulls from there. */
  images?: string;
  push?: Omit<PushOptions, "log">;
  log: (message: string) => void;
}

export async function deploy(request: DeployRequest): Promise<void> {
  const chart = request.chart ? resolve(request.chart) : await builtChart();
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
  const args = ["upgrade", "--install", request.release, chart, "--kubeconfig", resolve(request.kubeconfig), "--namespace", "default"];
  if (request.values) args.push("--values", resolve(request.values));
  if (request.push) args.push("--set", `images.registry=${request.push.registry}`);
  const dryRun = await execa(helm, [...args, "--dry-run=server"], { reject: false });
  if (dryRun.exitCode !== 0)
    throw new UserError(
      `the release was refused before anything was applied: ${helmError(dryRun.stderr)}`,
      "fix what it names (values: docs/developer-path.md, 'Values'), then run deploy again",
    );
  request.log(`dry run on the server: ${request.release} accepted`);
  if (request.images && request.push) {
    request.log(`pushing ${request.images} into ${request.push.registry}`);
    const pushed = await pushImagesBundle(request.images, { ...request.push, log: request.log });
    request.log(`${pushed.length} images and charts in ${request.push.registry}, digests unchanged`);
  }
  const applied = await execa(helm, args, { reject: false });
  if (applied.exitCode !== 0)
    throw new UserError(
      `helm upgrade --install ${request.release} failed: ${helmError(applied.stderr)}`,
      `see 'helm status ${request.release}' and 'helm history ${request.release}'; run deploy again once fixed`,
    );
  request.log(`${request.release} installed (${chart}); helm status ${request.release} tells its revision`);
  if (request.waitSeconds > 0) await waitForDeployments(kc, request.waitSeconds, request.log);
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

async function waitForDeployments(kc: KubeConfig, seconds: number, log: (message: string) => void): Promise<void> {
  const apps = kc.makeApiClient(AppsV1Api);
  const deadline = Date.now() + seconds * 1000;
  const ready = new Set<string>();
  while (ready.size < DEPLOYMENTS.length) {
    for (const [namespace, name] of DEPLOYMENTS) {
      if (ready.has(name)) continue;
      const d = await apps.readNamespacedDeployment({ namespace, name });
      const wanted = d.spec?.replicas ?? 1;
      if ((d.status?.availableReplicas ?? 0) >= wanted && (d.status?.updatedReplicas ?? 0) >= wanted) {
        ready.add(name);
        log(`${namespace}/${name}: available`);
      }
    }
    if (ready.size === DEPLOYMENTS.length) return;
    if (Date.now() > deadline) {
      const waiting = DEPLOYMENTS.filter(([, name]) => !ready.has(name));
      const reasons = await Promise.all(waiting.map(([namespace, name]) => podReasons(kc, namespace, name)));
      throw new UserError(
        `installed, but not available after ${seconds} s: ${waiting.map(([ns, name], i) => `${ns}/${name} (${reasons[i]})`).join("; ")}`,
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

/** Helm's last "Error:" line, without its prefix. */
function helmError(stderr: string): string {
  const lines = stderr.trim().split("\n");
  const error = lines.filter((l) => l.startsWith("Error:")).at(-1) ?? lines.at(-1) ?? "";
  return error.replace(/^Error:\s*/, "");
}
