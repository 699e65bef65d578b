/**
 * TypeScript shapes of the objects the operator reads and writes. They mirror the CRDs
 * (manifests/crds/provisioning.yaml, and Metal3's BareMetalHost CRD, which the build takes
 * from the pinned baremetal-operator); the API server is the
 * validator of record, and bpa/api/spec.ts validates what the schema leaves open.
 */
import type { V1ObjectMeta } from "@kubernetes/client-node";
import type { AddonEntry } from "./addons.js";

// ---------------------------------------------------------------- Provisioning

/** One master entry as users write it (seed 002: cpu, memory), plus an optional MAC pin. */
export interface MasterEntry {
  cpu?: number;
  /** A Kubernetes quantity ("4Gi") or a number of bytes. */
  memory?: string | number;
  /** Pin this role to the host that has a NIC (or boot NIC) with this MAC address. */
  mac?: string;
}

/** One worker entry (seed 002: cpu, memory, sriov, qat), plus an optional MAC pin. */
export interface WorkerEntry extends MasterEntry {
  sriov?: boolean;
  qat?: boolean;
}

export interface ProvisioningSpec {
  /** A list of entries; a single object (the seed's sample) means a list of one. */
  master?: MasterEntry | MasterEntry[];
  worker?: WorkerEntry | WorkerEntry[];
  /** How many provisioning-agent pods to keep running (see bpa/README.md). */
  replicas?: number;
  /** The application cluster's Kubernetes version; default: the newest the appliance serves. */
  kubernetesVersion?: string;
  /** Addons installed once the cluster is Ready (bpa/api/addons.ts); absent: the appliance's default set, []: none. */
  addons?: AddonEntry[];
}

export type ConditionStatus = "True" | "False" | "Unknown";

export interface Condition {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export type Role = "master" | "worker";

export interface AssignedHost {
  /** BareMetalHost name. */
  name: string;
  namespace: string;
  role: Role;
  /** Index of the entry in spec.master[] or spec.worker[]. */
  index: number;
  mac: string;
  ip: string;
  cpu: number;
  ramMebibytes: number;
}

/**
 * Installing/Failed: the first install (cluster.yml). Ready: the cluster is installed and
 * nothing is to do. Updating: a day-2 operation runs on the installed cluster (it stays
 * usable). UpdateFailed: the last day-2 operation failed; the cluster runs as before it.
 */
export type Phase = "Pending" | "Invalid" | "Unsatisfiable" | "Installing" | "Ready" | "Failed" | "Updating" | "UpdateFailed";

/** What a Job of the BPA does to the application cluster (bpa/controller/operations.ts). */
export type OperationKind = "install" | "scale" | "add-control-plane" | "remove" | "upgrade";
export type OperationResult = "Running" | "Succeeded" | "Failed";

/** One operation in status.operations[]: the install and every day-2 operation after it. */
export interface OperationRecord {
  /** The first 16 hex digits of the operation's hash (its Job and inventory carry the whole). */
  id: string;
  kind: OperationKind;
  playbook: string;
  /** The BareMetalHosts it acts on: all for install and upgrade, the new or removed ones otherwise. */
  hosts: string[];
  job: string;
  result: OperationResult;
  /** The Kubernetes version the cluster has when it succeeds (for an upgrade: its step). */
  kubernetesVersion?: string;
  fromVersion?: string;
  /** What it does, in one line ("scale.yml adds worker[1]=big-b"). */
  description?: string;
  startTime?: string;
  completionTime?: string;
  message?: string;
}

/** The installed application cluster: its hosts and version, changed only by operations that succeeded. */
export interface ClusterState {
  hosts: AssignedHost[];
  kubernetesVersion?: string;
  /** Installed without workers: the masters are the cluster's nodes too, and stay so when workers join. */
  mastersAreNodes: boolean;
  /** Counts the operations that changed it; part of every day-2 operation's hash. */
  revision: number;
  /** The versions of the nodes' other components it was installed or last upgraded with (kubespray pins: containerd, runc, CNI plugins, …). */
  components?: Record<string, string>;
}

/** A node of the application cluster as its API server reports it (read through the kubeconfig). */
export interface ClusterNode {
  name: string;
  kubeletVersion: string;
  ready: boolean;
}

export interface ProvisioningStatus {
  observedGeneration?: number;
  phase?: Phase;
  conditions?: Condition[];
  assignedHosts?: AssignedHost[];
  /** sha256 of the normalised spec the assignment was made for. */
  specHash?: string;
  /** sha256 of (normalised spec, assignment, retry token): one install per value. */
  installHash?: string;
  installJob?: string;
  inventoryConfigMap?: string;
  kubeconfigSecret?: string;
  sshKeySecret?: string;
  /** Names of the provisioning-agent pods (seed 002). */
  podAgents?: string[];
  /** The installed cluster (set when the install succeeded; day-2 operations change it). */
  cluster?: ClusterState;
  /** The install and the day-2 operations, oldest first (the last OPERATION_HISTORY). */
  operations?: OperationRecord[];
  /** The application cluster's nodes and their versions, read through the kubeconfig. */
  nodes?: ClusterNode[];
  nodesObservedAt?: string;
  /** Every addon the BPA installed, installs or removes, in the order of spec.addons. */
  addons?: AddonStatus[];
}

/**
 * Pending: to be installed (or upgraded) by the next addons Job. Installing: its Job runs.
 * Installed: the release is deployed at this version and values. Failed: its last Job failed
 * for it (message: Helm's words); retried when the values change or by the retry annotation.
 * Removing: no longer in spec.addons, its release is being uninstalled.
 */
export type AddonState = "Pending" | "Installing" | "Installed" | "Failed" | "Removing";

export interface AddonStatus {
  name: string;
  chart: string;
  version: string;
  namespace: string;
  /** The chart's manifest digest this state is for: what Helm installs (oci://…@digest). */
  digest?: string;
  /** What the version's tag names now, when that is not `digest` (the tag moved: reported, not followed). */
  tagDigest?: string;
  /** The resolved addon's hash (bpa/api/addons.ts) this state is for. */
  hash: string;
  state: AddonState;
  message?: string;
  /** The retry annotation's value when it was last tried. */
  retryToken?: string;
  lastTransitionTime?: string;
}

export interface Provisioning {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec?: ProvisioningSpec;
  status?: ProvisioningStatus;
}

// --------------------------------------------------------------- BareMetalHost

export interface BmhNic {
  name?: string;
  mac?: string;
  ip?: string;
  /** PCI vendor and product IDs, e.g. "0x8086 0x1572". */
  model?: string;
  pxe?: boolean;
  speedGbps?: number;
  vlanId?: number;
}

export interface BmhHardware {
  cpu?: { arch?: string; model?: string; clockMegahertz?: number; count?: number; flags?: string[] };
  ramMebibytes?: number;
  nics?: BmhNic[];
  hostname?: string;
  storage?: unknown[];
  systemVendor?: { manufacturer?: string; productName?: string; serialNumber?: string };
  firmware?: unknown;
}

export interface BareMetalHost {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec?: {
    online?: boolean;
    bootMACAddress?: string;
    externallyProvisioned?: boolean;
    consumerRef?: { apiVersion?: string; kind?: string; name?: string; namespace?: string };
    userData?: { name?: string; namespace?: string };
    [key: string]: unknown;
  };
  status?: {
    operationalStatus?: string;
    errorType?: string;
    errorMessage?: string;
    errorCount?: number;
    poweredOn?: boolean;
    provisioning?: { ID?: string; state?: string; [key: string]: unknown };
    hardware?: BmhHardware;
    [key: string]: unknown;
  };
}

/** Metal3's HardwareData (where Metal3 is moving hardware details): spec.hardware as BareMetalHost status.hardware. */
export interface HardwareData {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec?: { hardware?: BmhHardware };
}
