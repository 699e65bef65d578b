/**
 * The shipped accounts and their rights (manifests/bpa/, manifests/metal3/) on the
 * integration project's API server, and questions to its authorizer as one of them.
 */
import { readFile } from "node:fs/promises";
import {
  AuthorizationV1Api,
  KubeConfig,
  loadAllYaml,
  type V1ClusterRole,
  type V1ClusterRoleBinding,
  type V1Role,
  type V1RoleBinding,
  type V1ServiceAccount,
} from "@kubernetes/client-node";
import { isConflict, type Clients } from "../../bpa/runtime/kube.js";

const repo = new URL("../../", import.meta.url);

type RbacObject = V1ServiceAccount | V1ClusterRole | V1ClusterRoleBinding | V1Role | V1RoleBinding;
const RBAC_KINDS = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

/** The RBAC objects of a manifest file (its ServiceAccounts, roles and bindings), as written. */
export async function rbacObjects(relative: string): Promise<RbacObject[]> {
  const docs = loadAllYaml(await readFile(new URL(relative, repo), "utf8")) as ({ kind?: string } | null)[];
  return docs.filter((d): d is RbacObject => !!d && RBAC_KINDS.includes(d.kind!));
}

async function ensureNamespace(c: Clients, name: string): Promise<void> {
  try {
    await c.core.createNamespace({ body: { metadata: { name } } });
  } catch (error) {
    if (!isConflict(error)) throw error;
  }
}

/** Creates or replaces one object (the manifest wins over an earlier test file's copy). */
export async function applyRbacObject(c: Clients, o: RbacObject): Promise<void> {
  const kind = (o as { kind: string }).kind;
  const name = o.metadata!.name!;
  const namespace = o.metadata!.namespace!;
  const put = async (create: () => Promise<unknown>, replace: () => Promise<unknown>) => {
    try {
      await create();
    } catch (error) {
      if (!isConflict(error)) throw error;
      await replace();
    }
  };
  if (namespace) await ensureNamespace(c, namespace);
  if (kind === "ServiceAccount") {
    await put(
      () => c.core.createNamespacedServiceAccount({ namespace, body: o as V1ServiceAccount }),
      async () => undefined,
    );
  } else if (kind === "ClusterRole") {
    await put(
      () => c.rbac.createClusterRole({ body: o as V1ClusterRole }),
      () => c.rbac.replaceClusterRole({ name, body: o as V1ClusterRole }),
    );
  } else if (kind === "ClusterRoleBinding") {
    await put(
      () => c.rbac.createClusterRoleBinding({ body: o as V1ClusterRoleBinding }),
      () => c.rbac.replaceClusterRoleBinding({ name, body: o as V1ClusterRoleBinding }),
    );
  } else if (kind === "Role") {
    await put(
      () => c.rbac.createNamespacedRole({ namespace, body: o as V1Role }),
      () => c.rbac.replaceNamespacedRole({ namespace, name, body: o as V1Role }),
    );
  } else {
    await put(
      () => c.rbac.createNamespacedRoleBinding({ namespace, body: o as V1RoleBinding }),
      () => c.rbac.replaceNamespacedRoleBinding({ namespace, name, body: o as V1RoleBinding }),
    );
  }
}

/** Applies the RBAC objects of each manifest file (their namespaces made when missing). */
export async function applyRbac(c: Clients, ...relatives: string[]): Promise<void> {
  for (const relative of relatives) for (const o of await rbacObjects(relative)) await applyRbacObject(c, o);
}

/**
 * What a site does to let Provisionings live in `namespace`: the shipped RoleBinding of the
 * operator's per-namespace ClusterRole (manifests/bpa/rbac.yaml), made in that namespace.
 */
export async function bindOperatorTo(c: Clients, namespace: string): Promise<void> {
  const shipped = (await rbacObjects("manifests/bpa/rbac.yaml")).find(
    (o): o is V1RoleBinding => (o as { kind: string }).kind === "RoleBinding" && (o as V1RoleBinding).roleRef.name === "bpa-operator-namespace",
  );
  if (!shipped) throw new Error("manifests/bpa/rbac.yaml has no RoleBinding to ClusterRole bpa-operator-namespace");
  await applyRbacObject(c, { ...shipped, metadata: { ...shipped.metadata, namespace } });
}

/** The admin kubeconfig of the test, impersonating `user` (e.g. system:serviceaccount:bpa-system:bpa-operator). */
export function impersonating(kc: KubeConfig, user: string): KubeConfig {
  const as = new KubeConfig();
  as.loadFromString(kc.exportConfig());
  const current = as.getCurrentUser()!;
  as.users = as.users.map((u) => (u.name === current.name ? { ...u, impersonateUser: user } : u));
  return as;
}

export interface Access {
  verb: string;
  /** resource[.group], e.g. "jobs.batch", "secrets", "clusterrolebindings.rbac.authorization.k8s.io". */
  resource: string;
  namespace?: string;
  name?: string;
  subresource?: string;
}

/** What `kubectl auth can-i VERB RESOURCE [NAME] -n NS --as USER` asks: a SubjectAccessReview. */
export async function can(kc: KubeConfig, user: string, a: Access): Promise<boolean> {
  const [resource, group = ""] = a.resource.split(/\.(.*)/) as [string, string?];
  const groups = user.startsWith("system:serviceaccount:")
    ? ["system:serviceaccounts", `system:serviceaccounts:${user.split(":")[2]}`, "system:authenticated"]
    : ["system:authenticated"];
  const review = await kc.makeApiClient(AuthorizationV1Api).createSubjectAccessReview({
    body: {
      spec: {
        user,
        groups,
        resourceAttributes: {
          verb: a.verb,
          group,
          resource,
          ...(a.namespace ? { namespace: a.namespace } : {}),
          ...(a.name ? { name: a.name } : {}),
          ...(a.subresource ? { subresource: a.subresource } : {}),
        },
      },
    },
  });
  return review.status?.allowed === true;
}

export const serviceAccount = (namespace: string, name: string) => `system:serviceaccount:${namespace}:${name}`;
