/**
 * A runner pod's identity as the BPA makes it, for tests that run the runner outside a pod: a
 * ServiceAccount with a Role of the given rules, and its token and the API server's CA written
 * where a pod would have them mounted (BPA_SERVICEACCOUNT_DIR).
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CoreV1Api, RbacAuthorizationV1Api, type AuthenticationV1TokenRequest, type KubeConfig, type V1PolicyRule } from "@kubernetes/client-node";

export async function runnerIdentity(kc: KubeConfig, namespace: string, name: string, rules: V1PolicyRule[], dir: string): Promise<{ server: URL }> {
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  await rbac.createNamespacedRole({ namespace, body: { metadata: { name }, rules } });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name, namespace }],
    },
  });
  const token = (
    await core.createNamespacedServiceAccountToken({
      name,
      namespace,
      body: { spec: { audiences: [], expirationSeconds: 900 } } as AuthenticationV1TokenRequest,
    })
  ).status!.token;
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "token"), token);
  const cluster = kc.getCurrentCluster()!;
  await writeFile(join(dir, "ca.crt"), cluster.caData ? Buffer.from(cluster.caData, "base64") : await readFile(cluster.caFile!));
  return { server: new URL(cluster.server) };
}
