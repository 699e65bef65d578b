/**
 * The namespaces the operator works in. Its rights there (writing an install's objects,
 * reading its Jobs, Deployments and Pods) come from a RoleBinding to ClusterRole
 * bpa-operator-namespace in each namespace (manifests/bpa/rbac.yaml), not from a
 * cluster-wide grant. A namespace is opened (its informers started, their caches filled)
 * the first time one of its Provisionings is reconciled, once a SelfSubjectAccessReview
 * shows that the operator may list and watch there; until then the Provisioning is told
 * which binding is missing.
 */
import { AuthorizationV1Api } from "@kubernetes/client-node";
import type { Clients } from "../runtime/kube.js";

export const NAMESPACE_CLUSTER_ROLE = "bpa-operator-namespace";

/** What the informers of one namespace need. */
const INFORMER_RIGHTS = (["jobs.batch", "deployments.apps", "pods"] as const).flatMap((what) => (["list", "watch"] as const).map((verb) => ({ what, verb })));

export type NamespaceAccess = { ok: true } | { ok: false; missing: string[] };

/** The informers of one namespace (ResilientInformers), started and stopped together. */
export type ScopeInformers = readonly { hasSynced: Promise<void>; start(): Promise<void>; stop(): Promise<void> }[];

export interface NamespaceScopesOptions {
  c: Clients;
  /** Makes (does not start) the informers of a namespace, with their event handlers. */
  informers: (namespace: string) => ScopeInformers;
  /** How long opening waits for the caches before the reconcile fails (and is retried). */
  syncTimeoutMs?: number;
}

export class NamespaceScopes {
  private readonly opened = new Map<string, { informers: ScopeInformers; synced: Promise<void> }>();
  private readonly authz: AuthorizationV1Api;
  private stopped = false;

  constructor(private readonly options: NamespaceScopesOptions) {
    this.authz = options.c.kc.makeApiClient(AuthorizationV1Api);
  }

  /** The rights the informers need in `namespace` that the operator lacks ("list jobs.batch", ...). */
  async missingRights(namespace: string): Promise<string[]> {
    const answers = await Promise.all(
      INFORMER_RIGHTS.map(async ({ what, verb }) => {
        const [resource, group = ""] = what.split(/\.(.*)/) as [string, string?];
        const review = await this.authz.createSelfSubjectAccessReview({
          body: { spec: { resourceAttributes: { namespace, verb, group, resource } } },
        });
        return review.status?.allowed ? undefined : `${verb} ${what}`;
      }),
    );
    return answers.filter((a): a is string => a !== undefined);
  }

  /** Opens the namespace (once): its informers run and their caches are filled; or which rights are missing. */
  async open(namespace: string): Promise<NamespaceAccess> {
    if (this.stopped) throw new Error("the operator is stopping");
    let scope = this.opened.get(namespace);
    if (!scope) {
      const missing = await this.missingRights(namespace);
      if (missing.length) return { ok: false, missing };
      scope = this.opened.get(namespace); // another worker may have opened it meanwhile
      if (!scope) {
        if (this.stopped) throw new Error("the operator is stopping");
        const informers = this.options.informers(namespace);
        scope = { informers, synced: Promise.all(informers.map((i) => i.hasSynced)).then(() => undefined) };
        this.opened.set(namespace, scope);
        await Promise.all(informers.map((i) => i.start()));
      }
    }
    const timeoutMs = this.options.syncTimeoutMs ?? 60_000;
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        scope.synced,
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`the caches of namespace ${namespace} did not fill within ${timeoutMs / 1000} s`)), timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
    return { ok: true };
  }

  isOpen(namespace: string): boolean {
    return this.opened.has(namespace);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.opened.values()].flatMap((s) => s.informers.map((i) => i.stop())));
  }
}
