/** The API clients the operator uses, and helpers for API errors. */
import {
  ApiException,
  AppsV1Api,
  BatchV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  RbacAuthorizationV1Api,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { UserError } from "../../common/errors.js";

export interface Clients {
  kc: KubeConfig;
  core: CoreV1Api;
  batch: BatchV1Api;
  apps: AppsV1Api;
  rbac: RbacAuthorizationV1Api;
  custom: CustomObjectsApi;
  coordination: CoordinationV1Api;
}

export function makeClients(kc: KubeConfig): Clients {
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    batch: kc.makeApiClient(BatchV1Api),
    apps: kc.makeApiClient(AppsV1Api),
    rbac: kc.makeApiClient(RbacAuthorizationV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    coordination: kc.makeApiClient(CoordinationV1Api),
  };
}

/** The kubeconfig at `path`, or the default one (KUBECONFIG, ~/.kube/config, in-cluster); a UserError with the fix when it cannot be read. */
export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (path) kc.loadFromFile(path);
    else kc.loadFromDefault();
  } catch (error) {
    throw new UserError(`cannot load the kubeconfig: ${(error as Error).message}`, "pass --kubeconfig PATH or set KUBECONFIG");
  }
  return kc;
}

export const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export function statusCode(error: unknown): number | undefined {
  if (error instanceof ApiException) return error.code;
  const e = error as { code?: unknown; statusCode?: unknown } | undefined;
  if (typeof e?.code === "number") return e.code;
  if (typeof e?.statusCode === "number") return e.statusCode;
  return undefined;
}

export const isNotFound = (error: unknown) => statusCode(error) === 404;
export const isConflict = (error: unknown) => statusCode(error) === 409;

/** The API's own message for an error ("jobs.batch \"x\" is forbidden: ..."), else the error's. */
export function errorMessage(error: unknown): string {
  if (error instanceof ApiException) {
    const body = error.body as unknown;
    try {
      const parsed = (typeof body === "string" ? JSON.parse(body) : body) as { message?: string };
      if (parsed?.message) return `${parsed.message} (HTTP ${error.code})`;
    } catch {
      // not JSON
    }
    return `HTTP ${error.code}: ${String(body).slice(0, 300)}`;
  }
  return error instanceof Error ? error.message : String(error);
}
