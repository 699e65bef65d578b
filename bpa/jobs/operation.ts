/**
 * Which operation a Provisioning needs next: the first install, then day-2 operations
 * on the installed cluster, one at a time, each with kubespray's playbook for it
 * (docs/operations/nodes.md and upgrades.md of the pinned kubespray):
 *
 * - new workers: scale.yml --limit=<new hosts>,<first master> (the runner refreshes every
 *   host's facts first; scale.yml's play that uploads the control plane's certificates for
 *   joining nodes runs on the first master only, and a limit without it leaves the new
 *   nodes without the certificate key: "no attribute 'kubeadm_certificate_key'");
 * - new masters: cluster.yml over every host (kubespray cannot add a control plane with scale.yml);
 * - a worker entry gone: remove-node.yml -e node=<hosts>, with the removed hosts still in
 *   the inventory (kubespray drains them, resets them and deletes the nodes); after the
 *   additions, so that a replaced worker's pods have somewhere to go;
 * - a newer spec.kubernetesVersion: upgrade-cluster.yml with kube_version one minor at a time.
 *
 * Pure: the reconciler gives it the installed cluster and the wanted assignment.
 */
import type { AssignedHost, ClusterState, OperationKind } from "../api/types.js";
import { roleLabel } from "../api/spec.js";
import { compareVersions } from "../../common/kubespray-pins.js";

export interface OperationPlan {
  kind: OperationKind;
  playbook: string;
  /** The hosts of its inventory. */
  inventoryHosts: AssignedHost[];
  /** Whether the masters are in [kube_node] of its inventory. */
  mastersAreNodes: boolean;
  /** ansible-playbook --limit (host names), when it must not touch the other hosts. */
  limit?: string[];
  /** Extra variables of the playbook run (-e name=value). */
  extraVars?: Record<string, string>;
  /** The BareMetalHosts it acts on (for status). */
  hosts: string[];
  /** kube_version of its inventory. */
  kubernetesVersion?: string;
  fromVersion?: string;
  /** The cluster once it succeeded. */
  outcome: ClusterState;
  /** One line for status and Events: "scale.yml adds worker[1]=big-b". */
  summary: string;
}

export type NextOperation = { operation: OperationPlan } | { upToDate: true } | { blocked: string };

export interface NextOperationInput {
  /** The installed cluster; undefined before the first install succeeded. */
  cluster?: ClusterState;
  /** The assignment the spec asks for now (installed hosts keep their roles). */
  wanted: readonly AssignedHost[];
  /** The version the spec asks for (its own, else the newest served). */
  wantedVersion?: string;
  /** The versions the appliance serves. */
  servedVersions: readonly string[];
  /** The versions of the nodes' other components the appliance serves (component -> version). */
  servedComponents?: Readonly<Record<string, string>>;
}

export const PLAYBOOK = {
  install: "cluster.yml",
  scale: "scale.yml",
  "add-control-plane": "cluster.yml",
  remove: "remove-node.yml",
  upgrade: "upgrade-cluster.yml",
} as const satisfies Record<OperationKind, string>;

const key = (h: Pick<AssignedHost, "namespace" | "name">) => `${h.namespace}/${h.name}`;
const label = (h: AssignedHost) => `${roleLabel(h)}=${h.name}`;

export function parseVersion(v: string): [number, number, number] {
  const [a, b, c] = v.split(".").map(Number);
  return [a ?? 0, b ?? 0, c ?? 0];
}

export function nextOperation(input: NextOperationInput): NextOperation {
  const { cluster, wanted } = input;
  if (!cluster) {
    const mastersAreNodes = !wanted.some((h) => h.role === "worker");
    return {
      operation: {
        kind: "install",
        playbook: PLAYBOOK.install,
        inventoryHosts: [...wanted],
        mastersAreNodes,
        hosts: wanted.map((h) => h.name),
        ...(input.wantedVersion ? { kubernetesVersion: input.wantedVersion } : {}),
        outcome: {
          hosts: [...wanted],
          ...(input.wantedVersion ? { kubernetesVersion: input.wantedVersion } : {}),
          mastersAreNodes,
          revision: 1,
          ...servedComponentsOf(input),
        },
        summary: `cluster.yml installs ${wanted.map(label).join(", ")}`,
      },
    };
  }
  const wantedKeys = new Set(wanted.map(key));
  const installedKeys = new Set(cluster.hosts.map(key));
  const removed = cluster.hosts.filter((h) => !wantedKeys.has(key(h)));
  const added = wanted.filter((h) => !installedKeys.has(key(h)));
  const version = cluster.kubernetesVersion;
  const base = { mastersAreNodes: cluster.mastersAreNodes, ...(version ? { kubernetesVersion: version } : {}) };
  const next: NextCluster = (hosts, kubernetesVersion = version, components = cluster.components) => ({
    hosts,
    ...(kubernetesVersion ? { kubernetesVersion } : {}),
    mastersAreNodes: cluster.mastersAreNodes,
    revision: cluster.revision + 1,
    ...(components ? { components } : {}),
  });

  if (added.length) {
    const hosts = [...cluster.hosts, ...added];
    const addsMaster = added.some((h) => h.role === "master");
    const names = added.map((h) => h.name);
    const firstMaster = cluster.hosts.filter((h) => h.role === "master").sort((a, b) => a.index - b.index)[0];
    const kind: OperationKind = addsMaster ? "add-control-plane" : "scale";
    return {
      operation: {
        kind,
        playbook: PLAYBOOK[kind],
        inventoryHosts: hosts,
        ...base,
        ...(addsMaster ? {} : { limit: firstMaster ? [...names, firstMaster.name] : names }),
        hosts: names,
        outcome: next(hosts),
        summary: `${PLAYBOOK[kind]} adds ${added.map(label).join(", ")}`,
      },
    };
  }

  if (removed.length) {
    const masters = removed.filter((h) => h.role === "master");
    if (masters.length) {
      return {
        blocked: `removing a control-plane host (${masters.map(label).join(", ")}) is not done by the BPA: kubespray would have to move etcd members and the API servers' certificates; put the master entries back, or delete the Provisioning and install anew`,
      };
    }
    const remaining = cluster.hosts.filter((h) => wantedKeys.has(key(h)));
    if (!cluster.mastersAreNodes && !remaining.some((h) => h.role === "worker")) {
      return {
        blocked: `removing ${removed.map(label).join(", ")} would leave no node to run workloads (the masters were installed as control plane only): keep at least one worker entry`,
      };
    }
    const names = removed.map((h) => h.name);
    return {
      operation: {
        kind: "remove",
        playbook: PLAYBOOK.remove,
        inventoryHosts: [...cluster.hosts],
        ...base,
        extraVars: { node: names.join(","), skip_confirmation: "true" },
        hosts: names,
        outcome: next(remaining),
        summary: `remove-node.yml removes ${removed.map(label).join(", ")}`,
      },
    };
  }

  const target = input.wantedVersion;
  if (!target || !version || target === version) return componentUpdate(input, cluster, next);
  if (compareVersions(target, version) < 0) {
    return {
      blocked: `the cluster runs Kubernetes ${version}; ${target} is older and kubespray does not downgrade: set spec.kubernetesVersion to ${version} or newer`,
    };
  }
  const step = upgradeStep(version, target, input.servedVersions);
  if ("blocked" in step) return step;
  return upgrade(
    input,
    cluster,
    next,
    step.version,
    `upgrade-cluster.yml upgrades ${version} -> ${step.version}${step.version === target ? "" : ` (on the way to ${target}, one minor at a time)`}`,
  );
}

type NextCluster = (hosts: AssignedHost[], kubernetesVersion?: string, components?: Record<string, string>) => ClusterState;

/** upgrade-cluster.yml over every host at `version`: afterwards the cluster runs it and the served components. */
function upgrade(input: NextOperationInput, cluster: ClusterState, next: NextCluster, version: string, summary: string): NextOperation {
  const components = input.servedComponents ? { ...cluster.components, ...input.servedComponents } : cluster.components;
  return {
    operation: {
      kind: "upgrade",
      playbook: PLAYBOOK.upgrade,
      inventoryHosts: [...cluster.hosts],
      mastersAreNodes: cluster.mastersAreNodes,
      kubernetesVersion: version,
      ...(cluster.kubernetesVersion ? { fromVersion: cluster.kubernetesVersion } : {}),
      hosts: cluster.hosts.map((h) => h.name),
      outcome: next([...cluster.hosts], version, components),
      summary,
    },
  };
}

const servedComponentsOf = (input: NextOperationInput) => (input.servedComponents ? { components: { ...input.servedComponents } } : {});

/** "containerd 2.2.3 -> 2.2.4": the components whose served version is not the cluster's. */
export function componentChanges(
  installed: Readonly<Record<string, string>> | undefined,
  servedComponents: Readonly<Record<string, string>> | undefined,
): string[] {
  if (!installed || !servedComponents) return [];
  return Object.entries(servedComponents)
    .filter(([name, v]) => installed[name] !== undefined && installed[name] !== v)
    .map(([name, v]) => `${name} ${installed[name]} -> ${v}`);
}

/**
 * The appliance serves other versions of the nodes' components than the cluster runs (a new
 * appliance image): upgrade-cluster.yml at the cluster's own Kubernetes version brings every
 * node to them. A component the cluster did not record is not compared.
 */
function componentUpdate(input: NextOperationInput, cluster: ClusterState, next: NextCluster): NextOperation {
  const changes = componentChanges(cluster.components, input.servedComponents);
  if (!changes.length || !cluster.kubernetesVersion) return { upToDate: true };
  return upgrade(
    input,
    cluster,
    next,
    cluster.kubernetesVersion,
    `upgrade-cluster.yml updates ${changes.join(", ")} (Kubernetes stays ${cluster.kubernetesVersion})`,
  );
}

/** The next version on the way from `from` to `to`: `to` itself within one minor, else the newest served patch of the next minor. */
export function upgradeStep(from: string, to: string, served: readonly string[]): { version: string } | { blocked: string } {
  const [fMajor, fMinor] = parseVersion(from);
  const [tMajor, tMinor] = parseVersion(to);
  if (tMajor !== fMajor) return { blocked: `upgrading from ${from} to ${to} crosses a major version, which kubespray does not do` };
  if (tMinor - fMinor <= 1) return { version: to };
  const candidates = served.filter((v) => {
    const [major, minor] = parseVersion(v);
    return major === fMajor && minor === fMinor + 1;
  });
  if (!candidates.length) {
    return {
      blocked: `upgrading from ${from} to ${to} goes one minor at a time, through ${fMajor}.${fMinor + 1}, and this appliance serves no ${fMajor}.${fMinor + 1} version (it serves ${served.join(", ")})`,
    };
  }
  return { version: [...candidates].sort(compareVersions).pop()! };
}
