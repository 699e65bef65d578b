/**
 * Who is calling, and may they: the bearer token is checked by the bootstrap cluster
 * (TokenReview), the permission by its RBAC (SubjectAccessReview). So `kubectl create
 * token --audience icn-bpa-api` makes credentials and a RoleBinding grants them; the API
 * keeps no users. Tokens must be made for this API's audience: a token of the cluster's
 * own audience (a kubeconfig's, a pod's) or of another service is refused, so a token
 * handed to something else cannot be replayed here.
 *
 * Permissions are RBAC verbs on the resource `uploads` of the group bpa.akraino.org in the
 * API's namespace (no such object exists; RBAC authorises names, not objects), and `list`
 * on `provisionings` for the install status. `update` on `uploads` is the right to replace
 * what another user published (no ready-made role grants it: an administrator does, on purpose).
 * `create` on `applianceimages` is the right to upload what an upgrade of the appliance
 * reads (bpa-api-appliance-admin): what the appliance itself runs is an administrator's.
 */
import { AuthenticationV1Api, AuthorizationV1Api, type KubeConfig } from "@kubernetes/client-node";
import { BPA_GROUP } from "../api/constants.js";
import { RequestError } from "../../common/uploads.js";

export interface Caller {
  username: string;
  groups: string[];
  uid?: string;
  extra?: Record<string, string[]>;
}

export interface Permission {
  verb: string;
  resource: string;
  /** Default: bpa.akraino.org */
  group?: string;
  /** Namespaced to the API's namespace unless cluster-wide. */
  clusterWide?: boolean;
}

export const UPLOAD: Permission = { verb: "create", resource: "uploads" };
export const LIST_UPLOADS: Permission = { verb: "list", resource: "uploads" };
export const REPLACE_OTHERS_UPLOADS: Permission = { verb: "update", resource: "uploads" };
/** Uploading an appliance image for an upgrade: only the ClusterRole bpa-api-appliance-admin grants it, never bpa-api-uploader. */
export const UPLOAD_APPLIANCE_IMAGES: Permission = { verb: "create", resource: "applianceimages" };
/** Asking the appliance to upgrade itself to an uploaded appliance image, and reading how it went: bpa-api-appliance-admin only. */
export const UPGRADE_APPLIANCE: Permission = { verb: "create", resource: "applianceupgrades" };
export const READ_APPLIANCE_UPGRADE: Permission = { verb: "get", resource: "applianceupgrades" };
export const LIST_PROVISIONINGS: Permission = { verb: "list", resource: "provisionings", clusterWide: true };
export const LIST_HOSTS: Permission = { verb: "list", resource: "baremetalhosts", group: "metal3.io", clusterWide: true };

const CACHE_MS = 10_000;

/** The audience tokens for this API are made for (`kubectl create token SA --audience icn-bpa-api`). */
export const TOKEN_AUDIENCE = "icn-bpa-api";

export class Authenticator {
  private readonly authn: AuthenticationV1Api;
  private readonly authz: AuthorizationV1Api;
  private readonly cache = new Map<string, { caller: Caller | undefined; until: number }>();

  constructor(
    kc: KubeConfig,
    private readonly namespace: string,
    private readonly audience = TOKEN_AUDIENCE,
  ) {
    this.authn = kc.makeApiClient(AuthenticationV1Api);
    this.authz = kc.makeApiClient(AuthorizationV1Api);
  }

  /** The caller of a request with `Authorization: Bearer <token>`; 401 otherwise. */
  async authenticate(authorization: string | undefined): Promise<Caller> {
    const match = /^Bearer\s+(\S+)$/i.exec(authorization ?? "");
    const makeOne = `kubectl create token SERVICEACCOUNT -n NAMESPACE --audience ${this.audience}`;
    if (!match) throw new RequestError(401, `no bearer token: send Authorization: Bearer $(${makeOne})`);
    const token = match[1]!;
    const cached = this.cache.get(token);
    let caller: Caller | undefined;
    if (cached && cached.until > Date.now()) caller = cached.caller;
    else {
      const review = await this.authn.createTokenReview({
        body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token, audiences: [this.audience] } },
      });
      const forThisApi = review.status?.authenticated && review.status.audiences?.includes(this.audience);
      const user = forThisApi ? review.status!.user : undefined;
      caller = user?.username
        ? { username: user.username, groups: user.groups ?? [], ...(user.uid ? { uid: user.uid } : {}), ...(user.extra ? { extra: user.extra } : {}) }
        : undefined;
      if (this.cache.size > 1000) this.cache.clear();
      this.cache.set(token, { caller, until: Date.now() + CACHE_MS });
    }
    if (!caller) {
      throw new RequestError(
        401,
        `the bearer token is not valid for this API (expired, of another cluster, or not made for audience ${this.audience}, as a kubeconfig's or a pod's token is not): make one with ${makeOne}`,
      );
    }
    return caller;
  }

  /** 403 unless the cluster's RBAC allows `caller` the permission. */
  async authorize(caller: Caller, permission: Permission): Promise<void> {
    if (!(await this.allowed(caller, permission))) {
      const where = permission.clusterWide ? "cluster-wide" : `in namespace ${this.namespace}`;
      throw new RequestError(
        403,
        `${caller.username} may not ${permission.verb} ${permission.resource}.${permission.group ?? BPA_GROUP} ${where}: bind a role that grants it, e.g. ` +
          (permission.clusterWide
            ? `kubectl create clusterrolebinding NAME --clusterrole=bpa-api-viewer --user=${caller.username}`
            : `kubectl -n ${this.namespace} create rolebinding NAME --clusterrole=${roleGranting(permission)} --user=${caller.username}`),
      );
    }
  }

  /** Whether the cluster's RBAC allows `caller` the permission (SubjectAccessReview). */
  async allowed(caller: Caller, permission: Permission): Promise<boolean> {
    const review = await this.authz.createSubjectAccessReview({
      body: {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          user: caller.username,
          groups: caller.groups,
          ...(caller.uid ? { uid: caller.uid } : {}),
          ...(caller.extra ? { extra: caller.extra } : {}),
          resourceAttributes: {
            group: permission.group ?? BPA_GROUP,
            resource: permission.resource,
            verb: permission.verb,
            ...(permission.clusterWide ? {} : { namespace: this.namespace }),
          },
        },
      },
    });
    return review.status?.allowed === true;
  }
}

/** The ready-made ClusterRole (manifests/bpa/api.yaml) that grants a namespaced permission. */
function roleGranting(permission: Permission): string {
  if (permission.resource === UPLOAD_APPLIANCE_IMAGES.resource) return "bpa-api-appliance-admin";
  return permission.verb === "create" ? "bpa-api-uploader" : "bpa-api-viewer";
}
